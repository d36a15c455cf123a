"""An ASGI endpoint built on its first request (the AdCP MCP wire at ``/mcp``).

The MCP SDK's import costs a server ~0.3 s of CPU at start (its protocol types are some
hundred pydantic models, built twice, one set per protocol version), and most servers are
never asked over MCP. :class:`LazyEndpoint` imports and builds the endpoint when the first
request arrives, and starts the endpoint's ``run()`` context (the SDK's session manager)
then, inside a task group that lives as long as the application's lifespan.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus
from starlette.types import Receive, Scope, Send


class RunnableEndpoint(Protocol):
    """An ASGI endpoint whose ``run()`` context must be open while it serves."""

    def run(self) -> AbstractAsyncContextManager[None]: ...

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None: ...


class LazyEndpoint:
    """``build()`` is called on the first request (on the event loop: the import holds
    the GIL either way, once), and the endpoint it returns serves that request and every
    later one. Open :meth:`run`
    for the application's lifespan; a request outside it raises RuntimeError, as the
    endpoint's own ``run()`` requirement would."""

    def __init__(self, build: Callable[[], RunnableEndpoint]) -> None:
        self._build = build
        self._endpoint: RunnableEndpoint | None = None
        self._group: TaskGroup | None = None
        self._lock = asyncio.Lock()

    @property
    def built(self) -> bool:
        """Whether a request has built the endpoint yet."""
        return self._endpoint is not None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()  # closes the endpoint's run() context

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self._endpoint or await self._started()
        await endpoint(scope, receive, send)

    async def _started(self) -> RunnableEndpoint:
        async with self._lock:  # concurrent first requests build it once
            if self._endpoint is None:
                if self._group is None:
                    raise RuntimeError("the endpoint is served outside its application's run()")
                endpoint = self._build()
                await self._group.start(_serve, endpoint)
                self._endpoint = endpoint
            return self._endpoint


async def _serve(endpoint: RunnableEndpoint, *, task_status: TaskStatus[Any]) -> None:
    async with endpoint.run():
        task_status.started()
        await anyio.sleep_forever()
