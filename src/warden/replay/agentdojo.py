"""Replay AgentDojo v1.2 ground truth against a running Warden, as a signed ACS Observed Agent.

Per task (97 user tasks, 35 injection tasks): ``handshake/hello``,
``steps/sessionStart``, ``steps/userMessage`` with the task prompt, then per
ground-truth call a ``steps/toolCallRequest`` with its arguments and the
matching ``steps/toolCallResult`` — ``success`` with the output of executing the
call in AgentDojo's environment when Warden allowed (or modified) it,
``blocked`` with no output when Warden denied, asked or deferred — and
``steps/sessionEnd``. Every response's signature is verified on arrival. With a
bundle that prices tool calls (``spend``), an allowed call holds its cost and its
``success`` result settles it; the table's ``budget`` column counts the denies whose
reason code is ``budget_exceeded`` (they are included in ``deny``).

This replays recorded ground-truth calls; it is not an LLM agent run.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from warden.cli_output import print_table, table
from warden.crypto.agent_key import AgentCredential
from warden.replay.agentdojo_tasks import TaskRun, load_task_runs
from warden.wire.acs.client import AcsClient, http_transport

DECISION_COLUMNS = ("allow", "warn", "modify", "ask", "defer", "deny")
#: Counted beside the decisions: denies with reason code ``budget_exceeded`` (in ``deny`` too).
BUDGET_COLUMN = "budget"


@dataclass
class ReplaySummary:
    """Decision counts of ``steps/toolCallRequest`` per suite, plus protocol errors."""

    calls: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    tasks: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    def suites(self) -> list[str]:
        """Every suite replayed, sorted."""
        return sorted(set(self.calls) | set(self.tasks))

    def row(self, suite: str | None) -> dict[str, int]:
        """Counts of one suite (``None``: all suites): tasks, calls, each decision column,
        ``budget`` and ``errors``."""
        names = self.suites() if suite is None else [suite]
        c: Counter[str] = Counter()
        for name in names:
            c.update(self.calls.get(name, {}))
        return {
            "tasks": sum(self.tasks[name] for name in names),
            "calls": sum(c[d] for d in DECISION_COLUMNS),
            **{d: c[d] for d in DECISION_COLUMNS},
            BUDGET_COLUMN: c[BUDGET_COLUMN],
            "errors": c["error"],
        }

    def document(self) -> dict[str, Any]:
        """The summary as ``warden replay agentdojo --json`` prints it (docs/cli-json.md):
        ``suites`` (per suite :meth:`row`), ``all``, ``errors`` and ``error_samples``."""
        return {
            "suites": {suite: self.row(suite) for suite in self.suites()},
            "all": self.row(None),
            "errors": self.errors,
            "error_samples": list(self.error_samples),
        }

    def table(self) -> Table:
        t = table(
            "suite",
            "tasks",
            "calls",
            *DECISION_COLUMNS,
            BUDGET_COLUMN,
            "errors",
            title="AgentDojo v1.2 replay: decisions on toolCallRequest",
        )
        for suite in [*self.suites(), None]:
            t.add_row(suite or "all", *(str(n) for n in self.row(suite).values()))
        return t


def _decision(response: dict[str, Any]) -> str:
    result = response.get("result")
    if not isinstance(result, dict) or "decision" not in result:
        return "error"
    decision = str(result["decision"])
    if decision == "allow" and "policy_warning" in result.get("reason_codes", []):
        return "warn"
    return decision


def replay_task(client: AcsClient, run: TaskRun, summary: ReplaySummary) -> None:
    """Send one task's session; count decisions into ``summary``."""

    def check(resp: dict[str, Any], what: str) -> None:
        if "error" in resp:
            summary.errors += 1
            if len(summary.error_samples) < 10:
                summary.error_samples.append(
                    f"{run.suite}/{run.task_id} {what}: {resp['error'].get('message')}"
                )

    check(client.hello(), "handshake/hello")
    check(client.call("steps/sessionStart", {}), "sessionStart")
    check(
        client.call("steps/userMessage", {"content": [{"type": "text", "value": run.prompt}]}),
        "userMessage",
    )
    for step in run.steps:
        env = client.envelope(
            "steps/toolCallRequest",
            {
                "tool": {"name": step.function},
                "arguments": {k: {"value": v} for k, v in step.args.items()},
            },
        )
        resp = client.send(env)
        check(resp, f"toolCallRequest {step.function}")
        decision = _decision(resp)
        summary.calls[run.suite][decision] += 1
        if decision == "deny" and "budget_exceeded" in resp["result"].get("reason_codes", []):
            summary.calls[run.suite][BUDGET_COLUMN] += 1
        executed = decision in ("allow", "warn", "modify")
        if executed:
            status = "failure" if step.error else "success"
            outputs = [{"value": step.error if step.error else step.output}]
        else:
            status, outputs = "blocked", []
        check(
            client.call(
                "steps/toolCallResult",
                {
                    "tool": {"name": step.function},
                    "exit_status": status,
                    "outputs": outputs,
                    "request_id_ref": env["params"]["request_id"],
                },
            ),
            "toolCallResult",
        )
    check(client.call("steps/sessionEnd", {"reason": "completed"}), "sessionEnd")
    summary.tasks[run.suite] += 1


def replay(
    url: str,
    credential: AgentCredential,
    *,
    suites: Sequence[str] | None = None,
    console: Console | None = None,
) -> ReplaySummary:
    """Replay every task of the chosen suites against Warden at ``url``, signing as the
    registered agent of ``credential`` (``warden agents add … --key-out``); print the
    table."""
    out = console or Console()
    out.print("loading AgentDojo v1.2 ground truth (offline)…")
    runs = list(load_task_runs("v1.2", suites))
    summary = ReplaySummary()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with (
        httpx.Client(timeout=30.0) as http,
        Progress(*columns, console=out, transient=False) as progress,
    ):
        transport = http_transport(url, http)
        ready = http.get(url.rsplit("/", 1)[0] + "/readyz")
        bundle = ready.json().get("bundle", {}) if ready.status_code == 200 else {}
        out.print(
            f"Warden at {url} answers with bundle "
            f"{bundle.get('id', '?')}@{bundle.get('version', '?')} ({bundle.get('digest', '?')})"
        )
        job = progress.add_task("replaying tasks", total=len(runs))
        for run in runs:
            progress.update(job, description=f"{run.suite}/{run.task_id}")
            client = AcsClient.for_agent(transport, credential)
            replay_task(client, run, summary)
            progress.advance(job)
        progress.update(job, description="done")
    print_table(out, summary.table())
    for sample in summary.error_samples:
        out.print(f"[red]error[/red] {sample}")
    return summary
