"""One MCP connection as one ACS session: every governed MCP message is a signed step.

The gateway is Warden's Observed Agent for an MCP client (specs/acs.md §16, wrapped
MCP): it negotiates ``protocols/MCP/*`` once per connection, sends each governed MCP
request intact as ``params.payload`` of ``protocols/MCP/<method>``, and each upstream
answer as the wrapped *response* under the same method, so request and result sit on
one verifiable chain. A tool call that the spend gate priced is also concluded with a
``steps/toolCallResult`` naming its request (``request_id_ref``), which settles or
releases the hold as on the other wires.

It is synchronous and transport-independent: ``transport`` is any callable from
request bytes to the parsed ACS response (in process, ``AcsService.handle``). Nothing
here decides; an answer that is not a well-formed verdict is a deny (fail closed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from warden.errors import InvalidRequest, SessionRefused
from warden.ids import uuid4_text
from warden.transport.mcp_results import refused_answer
from warden.wire.acs.client import AcsClient, Transport

log = logging.getLogger(__name__)

#: What the gateway negotiates: every wrapped MCP method, the tool result hook (spend
#: settlement) and the session end that seals the chain.
GATEWAY_METHODS: tuple[str, ...] = ("protocols/MCP/*", "steps/toolCallResult", "steps/sessionEnd")

#: The MCP protocol version declared in ``wrapped_protocols``.
MCP_VERSION = "2025-06-18"

_DECISIONS = frozenset({"allow", "deny", "modify", "ask", "defer"})


@dataclass(frozen=True)
class Ruling:
    """Warden's answer for one MCP message: the ACS ``result`` object and its step id.

    ``decision`` is one of the ACS five; ``result`` carries ``reasoning``,
    ``reason_codes``, ``policy_references``, ``policy_data``, ``modifications``,
    ``ask_details``/``defer_details`` and ``chain_hash`` as Warden sent them.
    """

    decision: str
    request_id: str
    result: dict[str, Any] = field(default_factory=dict)
    #: The error answer Warden chained and sends in place of an upstream answer it
    #: refused (one outside the RFC 8785 domain, decision 1037), or None.
    replaced: dict[str, Any] | None = None

    @property
    def forwards(self) -> bool:
        """Whether the message may reach the real server (allow or modify)."""
        return self.decision in ("allow", "modify")

    @property
    def reason_codes(self) -> list[str]:
        return [str(c) for c in self.result.get("reason_codes", [])]

    @property
    def rule_ids(self) -> list[str]:
        refs = self.result.get("policy_references", [])
        return [str(r.get("rule_id", "")) for r in refs if isinstance(r, dict)]

    @property
    def reasoning(self) -> str:
        return str(self.result.get("reasoning", ""))

    @property
    def task(self) -> tuple[str | None, str | None]:
        """``(task_id, task_url)`` of the approval task an ask or defer filed, if any."""
        details = self.result.get("ask_details") or self.result.get("defer_details") or {}
        task_id, url = details.get("task_id"), details.get("task_url")
        return (
            task_id if isinstance(task_id, str) else None,
            url if isinstance(url, str) else None,
        )

    def meta(self) -> dict[str, Any]:
        """What the MCP client sees under ``_meta.warden``: decision, rules, reason
        codes, reasoning, ``policy_data``, the ACS step id and the chain head."""
        out: dict[str, Any] = {
            "decision": self.decision,
            "request_id": self.request_id,
            "rules": self.rule_ids,
            "reason_codes": self.reason_codes,
        }
        if self.reasoning:
            out["reasoning"] = self.reasoning
        if self.result.get("policy_data"):
            out["policy_data"] = self.result["policy_data"]
        task_id, task_url = self.task
        if task_id is not None:
            out["task_id"] = task_id
            out["task_url"] = task_url
        if isinstance(self.result.get("chain_hash"), str):
            out["chain_hash"] = self.result["chain_hash"]
        return out


def refusal(reason: str, text: str, request_id: str = "") -> Ruling:
    """A deny Warden's gateway makes itself when no verdict can be had (fail closed)."""
    return Ruling(
        "deny", request_id, {"decision": "deny", "reasoning": text, "reason_codes": [reason]}
    )


class Gateway:
    """The ACS session of one MCP connection. Not thread-safe: one call at a time
    (the proxy serialises them), as the session's chain is one sequence."""

    def __init__(
        self,
        transport: Transport,
        ikm: bytes,
        *,
        agent_id: str,
        key_id: str = "client",
        session_id: str | None = None,
        methods: Sequence[str] = GATEWAY_METHODS,
        in_process: bool = False,
    ) -> None:
        """``ikm``/``key_id``: the registered agent's key material and key id
        (:meth:`for_agent`); Warden refuses the master IKM without ``--unsafe-shared-ikm``.
        ``in_process``: ``transport`` is this process's own ``AcsService.handle``
        (:class:`~warden.wire.acs.client.AcsClient`)."""
        self.client = AcsClient(
            transport,
            ikm,
            agent_id=agent_id,
            key_id=key_id,
            session_id=session_id,
            in_process=in_process,
        )
        self._methods = tuple(methods)
        self._open = False

    @classmethod
    def for_agent(cls, transport: Transport, credential: Any, **kw: Any) -> Gateway:
        """A gateway signing as the registered agent of ``credential``
        (:class:`~warden.identity.agents.AgentCredential`)."""
        return cls(
            transport,
            credential.ikm,
            agent_id=credential.agent_id,
            key_id=credential.key_id,
            **kw,
        )

    @property
    def session_id(self) -> str:
        return self.client.session_id

    def open(self) -> dict[str, Any]:
        """``handshake/hello``; returns the ServerHello. Raises :class:`SessionRefused`
        when Warden refuses the session (nothing can then be forwarded)."""
        response = self.client.hello(self._methods, mcp_version=MCP_VERSION)
        hello = response.get("result")
        if not isinstance(hello, dict) or "methods_evaluated" not in hello:
            err = response.get("error") or {}
            raise SessionRefused(
                f"Warden refused the gateway's ACS session: {err.get('message', 'no ServerHello')}",
                reason="gateway_session_refused",
            )
        self._open = True
        return hello

    def check(self, message: dict[str, Any]) -> Ruling:
        """Decide one MCP request (``{"jsonrpc", "id", "method", "params"}``, intact).

        Never raises: a protocol error, an unsigned or malformed answer or any
        failure is a deny (reason ``gateway_error`` or the error's reason)."""
        method = str(message.get("method", ""))
        ruling = self._step(f"protocols/MCP/{method}", message)
        if "jcs_domain" in ruling.reason_codes:
            log.warning("refused the MCP request %s: %s", method, ruling.reasoning)
        return ruling

    def record(
        self,
        request: dict[str, Any],
        response: dict[str, Any],
        ruling: Ruling,
        *,
        failed: bool = False,
    ) -> Ruling:
        """Chain the upstream answer to ``request`` (the wrapped response step, same
        MCP method and id) and, when ``ruling`` held a spend reservation, conclude it
        with a ``steps/toolCallResult`` (``success`` unless ``failed``).

        Returns the response step's ruling: a deny means the result must not reach
        the client; a modify may carry redactions (pointers into the response)."""
        method = str(request.get("method", ""))
        answer = self._step(f"protocols/MCP/{method}", response)
        if "jcs_domain" in answer.reason_codes:  # refused, not changed; the refusal chained
            response, failed = refused_answer(response, answer.reasoning), True  # (1037)
            log.warning("%s (%s, id %r)", response["error"]["message"], method, response["id"])
            answer = replace(self._step(f"protocols/MCP/{method}", response), replaced=response)
        if not isinstance(answer.result.get("chain_hash"), str):
            # The answer could not be chained (over the body limit, outside RFC 8785, …):
            # chain that it was withheld, so the audit shows the call ran and its answer
            # did not pass, instead of a request with no response (decision 295).
            why = ", ".join(answer.reason_codes) or "gateway_error"
            withheld = {
                "jsonrpc": "2.0",
                "id": response.get("id", request.get("id")),
                "error": {
                    "code": -32603,  # JSON-RPC internal error
                    "message": f"result withheld: Warden could not record the MCP server's "
                    f"answer ({why})",
                },
            }
            if not isinstance(
                self._step(f"protocols/MCP/{method}", withheld).result.get("chain_hash"), str
            ):
                log.error("could not chain that the answer to %s was withheld", method)
        spend = (ruling.result.get("policy_data") or {}).get("spend")
        if isinstance(spend, dict) and isinstance(spend.get("reservation_id"), str):
            params = request.get("params") or {}
            payload = {
                "tool": {"name": str(params.get("name", "")), "provider": "mcp"},
                "request_id_ref": ruling.request_id,
                "exit_status": "failure" if failed else "success",
                "outputs": [{"value": response.get("result", response.get("error"))}],
            }
            settled = self._step("steps/toolCallResult", payload)
            if settled.decision != "allow":
                log.warning("the spend settlement step was answered %s", settled.decision)
        return answer

    def close(self) -> None:
        """Seal the session with ``steps/sessionEnd`` (best effort)."""
        if not self._open:
            return
        self._open = False
        ruling = self._step("steps/sessionEnd", {"reason": "completed"})
        if ruling.decision != "allow":
            log.warning("closing the ACS session was answered %s", ruling.decision)

    def _step(self, method: str, payload: dict[str, Any]) -> Ruling:
        request_id = uuid4_text()
        try:
            response = self.client.call(method, payload, request_id=request_id)
        except Exception as exc:  # noqa: BLE001 - fail closed: no verdict, no forwarding
            if isinstance(exc, InvalidRequest) and exc.reason == "jcs_domain":  # unsignable:
                return refusal("jcs_domain", exc.message, request_id)  # said by the caller
            log.exception("the ACS step %s failed", method)
            return refusal(
                "gateway_error", "Warden could not decide this call, so it is denied.", request_id
            )
        result = response.get("result")
        if not isinstance(result, dict) or result.get("decision") not in _DECISIONS:
            err = response.get("error") or {}
            data = err.get("data") or {}
            reason = str(data.get("reason") or "gateway_error")
            log.error("the ACS step %s was refused: %s", method, err.get("message"))
            return refusal(
                reason,
                f"Warden refused this call ({err.get('message', 'no verdict')}).",
                request_id,
            )
        if "signature" not in result:
            return refusal("gateway_error", "Warden's answer was not signed.", request_id)
        clean = {k: v for k, v in result.items() if k not in ("signature", "metadata")}
        return Ruling(str(result["decision"]), request_id, clean)
