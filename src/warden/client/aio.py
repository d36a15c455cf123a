"""``warden.AsyncClient``: :class:`~warden.client.sync.Client` for an event loop.

Same API, every step method a coroutine. Over HTTP it uses ``httpx.AsyncClient``;
in process it runs the runtime's blocking ACS service in a worker thread, so the loop
is never blocked by Warden's commit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from warden.client.connect import (
    acs_endpoint,
    env_credential,
    env_url,
    in_process_runtime,
    runtime_credential,
)
from warden.client.decision import APPROVAL_WAIT_TIMEOUT, Decision, client_deny
from warden.client.errors import WardenUnavailable
from warden.client.session import AcsSession, Prepared
from warden.client.steps import StepBuilder
from warden.client.sync import DEFAULT_APPROVAL_TIMEOUT_S, DEFAULT_POLL_S, DEFAULT_TIMEOUT_S
from warden.crypto.agent_key import Credential

if TYPE_CHECKING:
    from warden.runtime import Runtime
    from warden.settings import Settings

#: Bytes in, parsed JSON-RPC response out (awaitable).
AsyncTransport = Callable[[bytes], Awaitable[Any]]


def async_http_sender(endpoint: str, http: httpx.AsyncClient) -> AsyncTransport:
    """POST to ``endpoint``; :class:`WardenUnavailable` on any transport failure, a
    non-200 status or a body that is not JSON."""

    async def send(body: bytes) -> Any:
        try:
            resp = await http.post(
                endpoint, content=body, headers={"content-type": "application/json"}
            )
        except httpx.HTTPError as exc:
            raise WardenUnavailable(f"Warden at {endpoint} is unreachable: {exc}") from exc
        if resp.status_code != 200:
            raise WardenUnavailable(f"Warden at {endpoint} answered HTTP {resp.status_code}")
        try:
            return resp.json()
        except ValueError as exc:
            raise WardenUnavailable(f"Warden at {endpoint} answered non-JSON") from exc

    return send


class AsyncClient:
    """An asyncio ACS client for one session of one registered agent (see
    :class:`~warden.client.sync.Client` for the arguments and the fail-closed
    contract). Steps of one client are serialised by a lock: the session's chain head
    moves one step at a time."""

    def __init__(
        self,
        transport: AsyncTransport,
        credential: Credential,
        *,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._send = transport
        self.session = AcsSession(credential, session_id=session_id, metadata=metadata)
        self._steps = StepBuilder(self.session)
        self._on_close = on_close
        self._lock = asyncio.Lock()

    @classmethod
    def connect(
        cls,
        url: str,
        credential: Credential,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        **kw: Any,
    ) -> AsyncClient:
        http = httpx.AsyncClient(timeout=timeout)
        return cls(
            async_http_sender(acs_endpoint(url), http), credential, on_close=http.aclose, **kw
        )

    @classmethod
    def from_key_file(cls, url: str, key_file: str | Path, **kw: Any) -> AsyncClient:
        return cls.connect(url, env_credential(key_file), **kw)

    @classmethod
    def from_env(
        cls, *, url: str | None = None, key_file: str | Path | None = None, **kw: Any
    ) -> AsyncClient:
        return cls.connect(env_url(url), env_credential(key_file), **kw)

    @classmethod
    def in_process(
        cls,
        target: Runtime | Settings,
        *,
        agent_id: str | None = None,
        credential: Credential | None = None,
        **kw: Any,
    ) -> AsyncClient:
        runtime, owned = in_process_runtime(target)
        cred = runtime_credential(runtime, agent_id, credential)

        async def send(body: bytes) -> Any:
            return await asyncio.to_thread(runtime.acs.handle, body)

        async def close() -> None:
            runtime.close()

        return cls(send, cred, on_close=close if owned else None, **kw)

    async def aclose(self) -> None:
        if self._on_close is not None:
            closer, self._on_close = self._on_close, None
            await closer()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def chain_hash(self) -> str | None:
        return self.session.chain_hash

    async def handshake(self) -> None:
        async with self._lock:
            await self._handshake()

    async def _handshake(self) -> None:
        if not self.session.established:
            self.session.read_hello(await self._send(self.session.hello().body))

    async def _exchange(self, build: Callable[[], Prepared]) -> Decision:
        async with self._lock:
            await self._handshake()
            step = build()
            return self.session.read(step, await self._send(step.body))

    async def tool_call_request(
        self,
        tool_name: str,
        args: dict[str, Any],
        *,
        provider: str | None = None,
        operation: str | None = None,
        capability: str | None = None,
        raw_command: str | None = None,
        metadata: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> Decision:
        return await self._exchange(
            lambda: self._steps.tool_call_request(
                tool_name,
                args,
                provider=provider,
                operation=operation,
                capability=capability,
                raw_command=raw_command,
                metadata=metadata,
                request_id=request_id,
            )
        )

    async def tool_call_result(
        self,
        request: Decision | str,
        result: Any,
        *,
        is_error: bool = False,
        tool_name: str | None = None,
        duration_ms: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Decision:
        return await self._exchange(
            lambda: self._steps.tool_call_result(
                request,
                result,
                is_error=is_error,
                tool_name=tool_name,
                duration_ms=duration_ms,
                metadata=metadata,
            )
        )

    async def user_prompt(self, text: str, *, metadata: dict[str, Any] | None = None) -> Decision:
        return await self._exchange(lambda: self._steps.user_prompt(text, metadata))

    async def session_start(
        self, payload: dict[str, Any] | None = None, *, metadata: dict[str, Any] | None = None
    ) -> Decision:
        return await self._exchange(lambda: self._steps.session_start(payload, metadata))

    async def session_end(
        self, reason: str = "completed", *, metadata: dict[str, Any] | None = None
    ) -> Decision:
        return await self._exchange(lambda: self._steps.session_end(reason, metadata))

    async def wait_for_approval(
        self,
        decision: Decision,
        *,
        timeout: float = DEFAULT_APPROVAL_TIMEOUT_S,
        poll: float = DEFAULT_POLL_S,
    ) -> Decision:
        """See :meth:`Client.wait_for_approval` (timeout → a client ``deny`` with
        ``approval_wait_timeout``)."""
        deadline = time.monotonic() + timeout
        current = decision
        while current.needs_approval:
            left = deadline - time.monotonic()
            if left <= 0:
                return client_deny(
                    f"No approval arrived within {timeout:g} s "
                    f"(task {current.task_id or 'unknown'}); the step is refused.",
                    APPROVAL_WAIT_TIMEOUT,
                    current.step,
                )
            await asyncio.sleep(min(poll, left))
            current = await self._exchange(partial(self._steps.resubmit, current))
        return current
