"""The AI agent action request wire (seed 004): ``/v1/action-requests`` and its records.

An agent submits an action request v1 record; Warden validates and digests it, checks
an optional detached signature, decides it with the Guardian (policy method
``kla/action``), writes a signed policy decision, routes ``require_approval`` to the
approval desk (each decision there a signed approval event), records the agent's
outcome as a signed audit event, chains every record on the execution's audit chain,
and exports an execution's evidence bundle that verifies offline.
"""

from warden.wire.kla.routes import kla_router
from warden.wire.kla.service import KlaService

__all__ = ["KlaService", "kla_router"]
