"""Drop-in adapters that put Warden in front of an agent framework's tool calls
(issue 18 item 1). Each is a thin layer over :class:`warden.client.Client` /
:class:`warden.client.AsyncClient` and imports its framework, so import the module of
the framework you use (each needs its extra, e.g. ``pip install 'warden[langchain]'``):

- :mod:`warden.integrations.openai_agents`: tool input/output guardrails;
- :mod:`warden.integrations.langchain`: ``governed(tool, client)`` for LangChain/LangGraph;
- :mod:`warden.integrations.pydantic_ai`: ``WardenToolset``.

The mapping of Warden's answers onto a framework is shared (:mod:`._gate`).
"""
