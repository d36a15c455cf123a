"""docs/approvals.md names every state an approval task can be in, so a reader who meets
one in ``/v1/approvals`` or on the desk's state filter can look it up (decision 1157)."""

from __future__ import annotations

import re
from pathlib import Path

from warden.approvals.tasks import ApprovalState

DOC = Path(__file__).resolve().parents[2] / "docs" / "approvals.md"


def test_every_task_state_is_named_in_the_approvals_doc() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [s.value for s in ApprovalState if not re.search(rf"\b{s.value}\b", text)]
    assert missing == []
