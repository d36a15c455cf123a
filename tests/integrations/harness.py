"""Shared parts of the framework integration tests: the tools every framework's scripted
model calls, the bundle that rules on them, a desk approver, and the audit log read back.

The bundle (tests/integrations/bundle.yaml): get_weather is allowed, wipe_disk denied,
send_payment asks the finance group, lookup_orders runs with limit capped at 5, and a
read_note output holding a private key is redacted.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

BUNDLE = Path(__file__).resolve().parent / "bundle.yaml"
AGENT = "framework-agent"
PRIVATE_NOTE = "-----BEGIN PRIVATE KEY----- MIIEvQ -----END PRIVATE KEY-----"


@dataclass
class Ran:
    """Which tool bodies really ran, with which arguments (thread-safe)."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, tool: str, /, **args: Any) -> None:
        with self.lock:
            self.calls.append((tool, args))

    def names(self) -> list[str]:
        return sorted(name for name, _ in self.calls)


def tool_functions(ran: Ran) -> dict[str, Callable[..., str]]:
    """The plain Python tools each framework wraps (docstrings are their descriptions)."""

    def get_weather(city: str) -> str:
        """Today's weather in a city."""
        ran.add("get_weather", city=city)
        return f"Sunny in {city}"

    def wipe_disk(device: str) -> str:
        """Erase a block device."""
        ran.add("wipe_disk", device=device)
        return f"{device} erased"

    def send_payment(to: str, amount: int) -> str:
        """Send money to someone."""
        ran.add("send_payment", to=to, amount=amount)
        return f"Sent {amount} to {to}"

    def lookup_orders(customer: str, limit: int) -> str:
        """A customer's latest orders."""
        ran.add("lookup_orders", customer=customer, limit=limit)
        return f"{limit} orders of {customer}"

    def read_note(name: str) -> str:
        """Read a stored note."""
        ran.add("read_note", name=name)
        return PRIVATE_NOTE

    return {f.__name__: f for f in (get_weather, wipe_disk, send_payment, lookup_orders, read_note)}


#: The three calls every end-to-end test's scripted model makes in one turn.
THREE_CALLS = [
    ("get_weather", {"city": "Oslo"}, "call_weather"),
    ("wipe_disk", {"device": "/dev/sda"}, "call_wipe"),
    ("send_payment", {"to": "bob", "amount": 40}, "call_pay"),
]


def audit(records: Iterator[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """``(step type, tool name, decision)`` of each audit entry, in chain order."""
    out = []
    for rec in records:
        if rec.get("kind") != "entry" or "verdict" not in rec["entry"]:
            continue  # heads, and Warden-authored events (an agent registered, ...)
        entry = rec["entry"]
        request = json.loads(rec["request"]) if isinstance(rec.get("request"), str) else {}
        # The stored request is the envelope's params (payload, metadata, signature).
        tool = (request.get("payload") or {}).get("tool") or {}
        out.append((entry["step_type"], str(tool.get("name", "")), entry["verdict"]["decision"]))
    return out


def decisions_by_tool(rows: list[tuple[str, str, str]]) -> dict[str, list[str]]:
    """The toolCallRequest decisions per tool name, in order."""
    by: dict[str, list[str]] = {}
    for step, tool, decision in rows:
        if step == "steps/toolCallRequest":
            by.setdefault(tool, []).append(decision)
    return by


@contextmanager
def approving(find_and_approve: Callable[[], bool], timeout: float = 20.0) -> Iterator[None]:
    """Run a desk approver in a thread: it calls ``find_and_approve`` every 50 ms until it
    reports that it approved a task (or ``timeout`` seconds pass)."""
    stop = threading.Event()
    done = threading.Event()

    def loop() -> None:
        deadline = time.monotonic() + timeout
        while not stop.is_set() and time.monotonic() < deadline:
            if find_and_approve():
                done.set()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
    assert done.is_set(), "the desk approver found no task to approve"


def runtime_approver(rt: Any) -> Callable[[], bool]:
    """Approve the first pending task on an in-process runtime's desk as a finance approver."""
    from warden.approvals.tasks import ApprovalState
    from warden.identity.api_keys import Role

    who, _ = rt.api_keys.create("fiona", Role.APPROVER, ["finance"])

    def approve() -> bool:
        pending = rt.desk.list(states=(ApprovalState.PENDING,))
        if not pending:
            return False
        rt.desk.approve(pending[0].id, who, "checked the invoice")
        return True

    return approve


def http_approver(base_url: str, token: str) -> Callable[[], bool]:
    """Approve the first pending task over the REST desk (``/v1/approvals``)."""
    headers = {"authorization": f"Bearer {token}"}

    def approve() -> bool:
        r = httpx.get(f"{base_url}/v1/approvals", headers=headers, timeout=5)
        assert r.status_code == 200, r.text
        tasks = r.json()["data"]["tasks"]
        if not tasks:
            return False
        task_id = tasks[0]["id"]
        r = httpx.post(
            f"{base_url}/v1/approvals/{task_id}/approve",
            headers=headers,
            json={"reason": "checked the invoice"},
            timeout=5,
        )
        assert r.status_code == 200, r.text
        return True

    return approve
