"""The four KLA record kinds, apart from the records' machinery.

``warden verify-record --kind`` takes a :class:`RecordKind`, and Typer needs the type
to build the option: every ``warden`` command's start-up builds it, so it lives here,
importing nothing, rather than in :mod:`warden.kla.records` (cryptography, the schemas).
"""

from __future__ import annotations

from enum import StrEnum


class RecordKind(StrEnum):
    """Which of the four records a document is; the value names its id field."""

    ACTION_REQUEST = "action_request"
    POLICY_DECISION = "policy_decision"
    APPROVAL_EVENT = "approval_event"
    AUDIT_EVENT = "audit_event"

    @property
    def id_field(self) -> str:
        """The id member: ``action_request_id``, ``policy_decision_id`` and so on."""
        return f"{self.value}_id"

    @property
    def schema_path(self) -> str:
        """The schema file under ``warden/schemas/kla/``."""
        return self.value.replace("_", "-") + ".json"
