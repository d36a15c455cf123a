"""Warden's full ACS decision on the peers' scenario, in process (issue 16 item 5).

One :class:`ScenarioWarden` is a started Warden (``Runtime``, SQLite ``synchronous``
as given, the scenario bundle) and one ACS session of a registered agent, like
``bench/acs_decision.py``'s in-process case. :meth:`ScenarioWarden.bodies` pre-signs
requests (the client's signing is not Warden's cost); :meth:`ScenarioWarden.handle`
is what is timed: ``AcsService.handle`` = strict parse, envelope schema, HMAC verify
as the registered agent, ``Guardian.decide``, the approval gate (the ask finds its
pending desk task), the ContextEntry committed, the response rendered and signed.

Only Warden's public pieces are used (``Runtime``, ``Settings``, ``AgentRegistry``,
``AcsClient``), so the same file drives any checkout put first on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scenario_bundle import acs_tool_call

from warden.crypto.hmac_keys import derive_agent_ikm
from warden.runtime import Runtime
from warden.settings import Settings
from warden.wire.acs.client import AcsClient

IKM = bytes(range(32))
#: The scenario's agent, registered with a fixed key id.
AGENT_ID = "agent-7"
AGENT_KEY_ID = "agk_" + "7" * 16


class ScenarioWarden:
    """A started Warden deciding the scenario; ``close()`` stops it.

    ``workdir`` (created) holds the data directory; ``bundle`` is the scenario bundle
    file; ``sync`` is SQLite's ``synchronous`` (``NORMAL`` or ``FULL``);
    ``database_url`` replaces the data directory's SQLite file (PostgreSQL). Raises
    whatever ``Runtime.start`` raises for a bad bundle, data directory or database.
    """

    def __init__(
        self, workdir: Path, bundle: Path, sync: str = "NORMAL", database_url: str | None = None
    ) -> None:
        data = workdir / "warden-data"
        data.mkdir(parents=True, exist_ok=True)
        key = data / "ikm.key"
        key.write_text(IKM.hex())
        key.chmod(0o600)
        self.runtime = Runtime.start(
            Settings(
                data_dir=data,
                policy=bundle,
                key_file=key,
                sqlite_sync=sync,  # type: ignore[arg-type]
                database_url=database_url,
            )
        )
        self._register()
        self.client = AcsClient(
            self.runtime.acs.handle,
            derive_agent_ikm(IKM, AGENT_KEY_ID),
            agent_id=AGENT_ID,
            key_id=AGENT_KEY_ID,
            track_chain=False,
        )
        hello = self.client.hello()
        if "result" not in hello:
            raise RuntimeError(f"handshake refused: {hello}")
        self.handle = self.runtime.acs.handle

    def _register(self) -> None:
        from warden.identity.agents import AgentRegistry

        registry = AgentRegistry(self.runtime.store, IKM)
        if registry.get(AGENT_ID) is None:
            registry.add(AGENT_ID, "bench", key_id=AGENT_KEY_ID)

    def body(self, request: dict[str, Any]) -> bytes:
        """One signed ``steps/toolCallRequest`` for scenario ``request``, as bytes."""
        payload, metadata = acs_tool_call(request)
        envelope = self.client.envelope("steps/toolCallRequest", payload, metadata=metadata)
        return json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).encode()

    def bodies(self, request: dict[str, Any], n: int) -> list[bytes]:
        """``n`` signed requests for ``request`` (fresh request ids, timestamps now)."""
        return [self.body(request) for _ in range(n)]

    def decide(self, request: dict[str, Any]) -> tuple[str, list[str]]:
        """Scenario ``request`` through the whole ACS path: ``(decision, cited rule ids)``.
        Raises RuntimeError with the answer when Warden answers an error."""
        answer = self.handle(self.body(request))
        result = answer.get("result")
        if not isinstance(result, dict) or "decision" not in result:
            raise RuntimeError(f"no decision for {request}: {answer}")
        cited = [str(r.get("rule_id")) for r in result.get("policy_references") or []]
        return str(result["decision"]), cited

    def close(self) -> None:
        self.runtime.close()


def check_probes(warden: ScenarioWarden, scenario: Any) -> list[dict[str, Any]]:
    """Run the scenario's probes; one row per probe with ``expected`` (the reference's
    effect), ``got`` and ``ok``. The benchmarked request must also cite its rule."""
    rows = []
    for probe in scenario.PROBES:
        expected, rule = scenario.reference_decide(probe)
        got, cited = warden.decide(probe)
        ok = got == expected and (probe is not scenario.REQUEST or rule in cited)
        rows.append(
            {
                "tool": probe["tool"],
                "amount": probe["args"].get("amount_usd"),
                "env": probe["env"],
                "expected": expected,
                "got": got,
                "cited": cited,
                "ok": ok,
            }
        )
    return rows
