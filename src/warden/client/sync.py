"""``warden.Client``: the blocking ACS client an agent framework's hooks call.

One client is one ACS session (specs/acs.md §4–§12). The handshake is sent lazily
before the first step; every request is signed with the registered agent's key and
every answer verified. Methods return a :class:`~warden.client.decision.Decision` or
raise a :class:`~warden.errors.WardenError` (fail closed, decision 300)::

    with Client.from_key_file("http://127.0.0.1:8787", "agent.key") as warden:
        d = warden.tool_call_request("send_email", {"to": "bob@example.com"})
        if d.needs_approval:
            d = warden.wait_for_approval(d, timeout=120)
        if not d.allowed:
            refuse(d.reasoning)
        out = run_tool(d.args_for(args))
        warden.tool_call_result(d, out)
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
from warden.crypto.agent_key import Credential

if TYPE_CHECKING:
    from warden.runtime import Runtime
    from warden.settings import Settings

#: Bytes in, parsed JSON-RPC response out.
SyncTransport = Callable[[bytes], Any]

#: Seconds per HTTP request. Longer than the server's longest default lock wait
#: (``DEFAULT_LOCK_TIMEOUT_MS``: 10 s on SQLite) plus margin, so a locked store reaches
#: the client as the server's signed ``deny`` (``store_unavailable``), not a
#: ``WardenUnavailable`` timeout (decision 1155).
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_APPROVAL_TIMEOUT_S = 300.0
DEFAULT_POLL_S = 2.0


def http_sender(endpoint: str, http: httpx.Client) -> SyncTransport:
    """POST to ``endpoint``; :class:`WardenUnavailable` on any transport failure, a
    non-200 status or a body that is not JSON."""

    def send(body: bytes) -> Any:
        try:
            resp = http.post(endpoint, content=body, headers={"content-type": "application/json"})
        except httpx.HTTPError as exc:
            raise WardenUnavailable(f"Warden at {endpoint} is unreachable: {exc}") from exc
        if resp.status_code != 200:
            raise WardenUnavailable(f"Warden at {endpoint} answered HTTP {resp.status_code}")
        try:
            return resp.json()
        except ValueError as exc:
            raise WardenUnavailable(f"Warden at {endpoint} answered non-JSON") from exc

    return send


class Client:
    """A blocking ACS client for one session of one registered agent.

    ``transport`` sends request bytes and returns the parsed response (see
    :meth:`connect`, :meth:`from_key_file`, :meth:`from_env`, :meth:`in_process`).
    ``session_id`` names the session: a UUID is used as is, any other string maps to a
    stable UUIDv5 (so a framework's session name always reaches the same ACS session);
    None starts a new one. ``metadata`` is added to every step's ``params.metadata``
    (``user_context``, ``environment`` …). Not thread-safe: one client per session.
    """

    def __init__(
        self,
        transport: SyncTransport,
        credential: Credential,
        *,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._send = transport
        self.session = AcsSession(credential, session_id=session_id, metadata=metadata)
        self._steps = StepBuilder(self.session)
        self._on_close = on_close

    # -- construction -------------------------------------------------------------

    @classmethod
    def connect(
        cls,
        url: str,
        credential: Credential,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        **kw: Any,
    ) -> Client:
        """A client over HTTP to Warden at ``url`` (base URL or ``…/acs``);
        ``timeout`` in seconds per request, default 30: longer than the server's
        default wait for a locked store (10 s on SQLite, 5 s on PostgreSQL), so a
        locked store answers with its signed ``deny`` (``store_unavailable``) rather
        than the client giving up with :class:`WardenUnavailable`. Raise it above
        ``database_lock_timeout_ms`` if the server sets that longer."""
        http = httpx.Client(timeout=timeout)
        return cls(http_sender(acs_endpoint(url), http), credential, on_close=http.close, **kw)

    @classmethod
    def from_key_file(cls, url: str, key_file: str | Path, **kw: Any) -> Client:
        """:meth:`connect` with the credential in ``key_file`` (``warden agents add
        --key-out``)."""
        return cls.connect(url, env_credential(key_file), **kw)

    @classmethod
    def from_env(
        cls, *, url: str | None = None, key_file: str | Path | None = None, **kw: Any
    ) -> Client:
        """:meth:`connect` to ``$WARDEN_URL`` with the key file ``$WARDEN_AGENT_KEY``
        (either overridden by the arguments)."""
        return cls.connect(env_url(url), env_credential(key_file), **kw)

    @classmethod
    def in_process(
        cls,
        target: Runtime | Settings,
        *,
        agent_id: str | None = None,
        credential: Credential | None = None,
        **kw: Any,
    ) -> Client:
        """A client that calls a runtime's ACS service directly (no HTTP), as the
        registered ``agent_id`` (its newest active key) or ``credential``. Given
        Settings, the client starts the runtime and closes it in :meth:`close`."""
        runtime, owned = in_process_runtime(target)
        cred = runtime_credential(runtime, agent_id, credential)
        return cls(runtime.acs.handle, cred, on_close=runtime.close if owned else None, **kw)

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()
            self._on_close = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- session state --------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def chain_hash(self) -> str | None:
        """The audit chain head Warden last published for this session."""
        return self.session.chain_hash

    def handshake(self) -> None:
        """Send ``handshake/hello`` unless done; lazily called by every step. A session
        another process already opened under this agent's key is joined."""
        if self.session.established:
            return
        self.session.read_hello(self._send(self.session.hello().body))

    def _exchange(self, prepared: Prepared | Callable[[], Prepared]) -> Decision:
        self.handshake()
        # Build after the handshake: the envelope carries the chain head it saw.
        step = prepared() if callable(prepared) else prepared
        return self.session.read(step, self._send(step.body))

    # -- steps ------------------------------------------------------------------------

    def tool_call_request(
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
        """``steps/toolCallRequest`` for ``tool_name(**args)``. ``capability`` is the
        ACS capability string (``filesystem.delete``, ``network.egress`` …);
        ``request_id`` fixes the step's request id (a UUID, once per session: a
        process that reports the result later can name it)."""
        return self._exchange(
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

    def tool_call_result(
        self,
        request: Decision | str,
        result: Any,
        *,
        is_error: bool = False,
        tool_name: str | None = None,
        duration_ms: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Decision:
        """``steps/toolCallResult`` for the request answered by ``request`` (its
        Decision or request id): ``result`` is the tool's output (any JSON value),
        ``is_error`` marks a failed call. A ``deny`` means the output must not reach
        the model; a ``modify`` carries redactions in ``raw["modifications"]``."""
        return self._exchange(
            lambda: self._steps.tool_call_result(
                request,
                result,
                is_error=is_error,
                tool_name=tool_name,
                duration_ms=duration_ms,
                metadata=metadata,
            )
        )

    def user_prompt(self, text: str, *, metadata: dict[str, Any] | None = None) -> Decision:
        """``steps/userMessage`` with one text part."""
        return self._exchange(lambda: self._steps.user_prompt(text, metadata))

    def session_start(
        self, payload: dict[str, Any] | None = None, *, metadata: dict[str, Any] | None = None
    ) -> Decision:
        """``steps/sessionStart`` (``payload``: ``intent``, ``platform_context`` …)."""
        return self._exchange(lambda: self._steps.session_start(payload, metadata))

    def session_end(
        self, reason: str = "completed", *, metadata: dict[str, Any] | None = None
    ) -> Decision:
        """``steps/sessionEnd``: Warden seals the session's chain; later steps are
        denied."""
        return self._exchange(lambda: self._steps.session_end(reason, metadata))

    def wait_for_approval(
        self,
        decision: Decision,
        *,
        timeout: float = DEFAULT_APPROVAL_TIMEOUT_S,
        poll: float = DEFAULT_POLL_S,
    ) -> Decision:
        """Resubmit ``decision``'s step every ``poll`` seconds until Warden answers
        something other than ``ask``/``defer`` (the approver decided on the desk) or
        ``timeout`` seconds pass. Returns the final Decision; on timeout a client-made
        ``deny`` with reason code ``approval_wait_timeout`` (decision 301). Each
        resubmission is an audited step. A Decision that needs no approval is
        returned as is."""
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
            time.sleep(min(poll, left))
            current = self._exchange(partial(self._steps.resubmit, current))
        return current

    def __repr__(self) -> str:
        return f"Client(agent={self.session.credential.agent_id!r}, session={self.session_id!r})"
