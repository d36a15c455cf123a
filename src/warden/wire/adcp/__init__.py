"""The AdCP governance agent wire (issue 9; specs/adcp-spend-kla.md §1): Warden answers
``get_adcp_capabilities``, ``sync_plans``, ``check_governance``, ``report_plan_outcome``,
``get_plan_audit_logs`` and ``get_task_status`` over REST (``POST /adcp/<task>``,
:mod:`.rest`) and MCP Streamable HTTP (``/mcp``, :mod:`.mcp`), one service underneath
(:mod:`.service`). Domain rules live in :mod:`warden.adcp`.
"""

from __future__ import annotations

from warden.adcp.state import AdcpState
from warden.wire.adcp.service import AdcpService, Reply

__all__ = ["AdcpService", "AdcpState", "Reply"]
