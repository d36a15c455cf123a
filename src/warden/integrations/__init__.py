"""Drop-in adapters that put Warden in front of agent frameworks (issue 18 item 1).

Each adapter is a thin layer over :class:`warden.Client` / :class:`warden.AsyncClient`:
a framework's tool-call hook becomes ``steps/toolCallRequest``, its result hook
``steps/toolCallResult``, and the Decision is mapped back (deny → the framework's
refusal, ask → wait for the desk or refuse, modify → the changed arguments). Every
adapter fails closed: when Warden cannot answer, the tool call is refused.

- :mod:`warden.integrations.claude_code`: ``warden hook claude-code`` (Claude Code
  command hooks);
- :mod:`warden.integrations.claude_agent_sdk`: ``can_use_tool`` and hook callbacks for
  the Claude Agent SDK (extra ``warden[claude-agent-sdk]``).

docs/integrations.md shows each with a copy-paste example.
"""
