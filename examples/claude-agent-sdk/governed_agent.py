"""A Claude Agent SDK agent governed by Warden (docs/integrations.md, "Claude Agent SDK").

Run a Warden (`warden serve`), register the agent
(`warden agents add sdk-agent --owner you@example.com --key-out sdk-agent.key`), then:

    WARDEN_URL=http://127.0.0.1:8787 WARDEN_AGENT_KEY=sdk-agent.key python governed_agent.py
"""

import asyncio

from claude_agent_sdk import ResultMessage, query

import warden
from warden.integrations.claude_agent_sdk import WardenGuard


async def main() -> None:
    async with warden.AsyncClient.from_env() as client:  # WARDEN_URL, WARDEN_AGENT_KEY
        guard = WardenGuard(client, approval_timeout=0)  # ask: refuse now, naming the task
        options = guard.options(cwd=".", max_turns=10)
        async for message in query(prompt="Tidy up the build folder.", options=options):
            if isinstance(message, ResultMessage):
                print(message.result)


asyncio.run(main())
