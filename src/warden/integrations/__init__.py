"""Drop-in adapters that put Warden in front of agent frameworks (issue 18 item 1).

Each adapter is a thin layer over :class:`warden.Client` / :class:`warden.AsyncClient`:
a framework's tool-call hook becomes ``steps/toolCallRequest``, its result hook
``steps/toolCallResult``, and the Decision is mapped back (deny → the framework's
refusal, ask → wait for the desk or refuse, modify → the changed arguments). Every
adapter fails closed: when Warden cannot answer, the tool call is refused. Each imports
its framework, so import the module of the framework you use (with its extra):

- :mod:`warden.integrations.claude_code`: ``warden hook claude-code`` (Claude Code
  command hooks);
- :mod:`warden.integrations.claude_agent_sdk`: ``can_use_tool`` and hook callbacks for
  the Claude Agent SDK (extra ``warden[claude-agent-sdk]``);
- :mod:`warden.integrations.openai_agents`: tool input/output guardrails for the OpenAI
  Agents SDK (extra ``warden[openai-agents]``);
- :mod:`warden.integrations.langchain`: ``governed(tool, client)`` for LangChain and
  LangGraph (extra ``warden[langchain]``);
- :mod:`warden.integrations.pydantic_ai`: ``WardenToolset`` for Pydantic AI (extra
  ``warden[pydantic-ai]``).

docs/integrations.md shows the Claude ones with copy-paste examples,
docs/integrations-frameworks.md the others; the last three share one mapping
(:mod:`._gate`).
"""
