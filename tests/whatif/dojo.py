"""A recorded AgentDojo v1.2 history for the what-if tests: every ground-truth task
replayed in process through a real runtime (examples/policies/agentdojo.yaml with the
AgentDojo budgets), signed as a registered agent whose registration is in the log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import AGENTDOJO_POLICY, ROOT

from warden.replay.agentdojo import ReplaySummary, replay_task
from warden.replay.agentdojo_tasks import load_task_runs
from warden.runtime import Runtime
from warden.wire.acs.client import AcsClient

AGENTDOJO_BUDGETS = ROOT / "examples" / "budgets" / "agentdojo.yaml"
#: The candidate of the tests: the three transfer ask rules no longer cover send_money.
SEND_MONEY_RULES = "tools: [send_money, schedule_transaction, update_scheduled_transaction]"


def record_agentdojo(rt: Runtime) -> ReplaySummary:
    """Replay every AgentDojo task against ``rt`` as the registered ``demo-agent``."""
    assert rt.agents is not None
    _, credential = rt.agents.add("demo-agent", "demo-owner", by="test")
    summary = ReplaySummary()
    for run in load_task_runs("v1.2"):
        replay_task(AcsClient.for_agent(rt.acs.handle, credential), run, summary)
    assert summary.errors == 0, summary.error_samples
    return summary


def send_money_candidate(folder: Path) -> Path:
    """The AgentDojo bundle with send_money taken out of every transfer ask rule."""
    text = AGENTDOJO_POLICY.read_text(encoding="utf-8")
    assert text.count(SEND_MONEY_RULES) == 4  # the allow rule and the three ask rules
    head, allow_rule, rest = text.partition(SEND_MONEY_RULES)
    rest = rest.replace(
        SEND_MONEY_RULES, "tools: [schedule_transaction, update_scheduled_transaction]"
    )
    out = folder / "candidate.yaml"
    out.write_text(head + allow_rule + rest, encoding="utf-8")
    return out


def valid(doc: dict[str, Any], command: str = "whatif") -> dict[str, Any]:
    """``doc`` after validating it against ``schemas/cli/<command>.json`` (python-jsonschema)."""
    from jsonschema import Draft202012Validator

    from warden.cli_output import cli_schema

    errors = list(Draft202012Validator(cli_schema(command)).iter_errors(doc))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]
    return doc
