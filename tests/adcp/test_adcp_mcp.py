"""The AdCP tasks over MCP Streamable HTTP at ``/mcp`` (the official ``mcp`` SDK client
against ``warden serve``'s app on loopback): tools listed by exact name, envelope and body
flat in ``structuredContent`` (validated like the REST replies), failures as ``isError``
with ``errors[]``, the API key required before MCP is reached."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from adcp_helpers import check_response, intent, live, mcp_session, plan, run

from warden.runtime import Runtime


def test_tasks_over_mcp(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(adcp_test_controller=True)
    with live(rt) as srv:

        async def go() -> dict[str, Any]:
            seen: dict[str, Any] = {}
            async with mcp_session(srv.url, srv.agent_token) as s:
                tools = {t.name for t in (await s.list_tools()).tools}
                assert {
                    "get_adcp_capabilities",
                    "sync_plans",
                    "check_governance",
                    "report_plan_outcome",
                    "report_plan_adjustment",
                    "get_plan_audit_logs",
                    "get_task_status",
                    "comply_test_controller",
                } == tools

                async def call(task: str, args: dict[str, Any], *, failed: bool = False) -> Any:
                    res = await s.call_tool(task, {"adcp_major_version": 3, **args})
                    body = res.structured_content
                    assert bool(res.is_error) is failed, body
                    assert json.loads(res.content[0].text) == body
                    check_response(task, body, failed=failed)
                    return body

                ctx = {"correlation_id": "mcp-1", "nested": {"x": [1, 2]}}
                caps = await call(
                    "get_adcp_capabilities", {"context": ctx, "protocols": ["media_buy"]}
                )
                assert caps["context"] == ctx and caps["adcp_version"] == "3.2"
                synced = await call(
                    "sync_plans", {"idempotency_key": str(uuid.uuid4()), "plans": [plan("m")]}
                )
                assert synced["plans"][0]["version"] == 1
                check = await call("check_governance", intent("m", 1000))
                assert check["verdict"] == "approved" and check["governance_context"]
                seen["missing"] = await call(
                    "check_governance", {**intent("nope", 1), "context": ctx}, failed=True
                )
                seen["forbidden"] = await call(
                    "comply_test_controller", {"scenario": "list_scenarios"}, failed=True
                )
                listed = await call(
                    "comply_test_controller",
                    {"scenario": "list_scenarios", "account": {"sandbox": True}},
                )
                assert listed["success"] is True and "seed_plan" in listed["scenarios"]
                seeded = await call(
                    "comply_test_controller",
                    {
                        "scenario": "seed_plan",
                        "account": {"sandbox": True},
                        "params": {
                            "plan_id": "seeded",
                            "fixture": {k: v for k, v in plan("seeded").items() if k != "plan_id"},
                        },
                    },
                )
                assert seeded["success"] is True
                again = await call(
                    "sync_plans", {"idempotency_key": str(uuid.uuid4()), "plans": [plan("seeded")]}
                )
                assert again["plans"][0]["version"] == 1  # same content as seeded: unchanged
            return seen

        seen = run(go())
        assert seen["missing"]["adcp_error"]["code"] == "PLAN_NOT_FOUND"
        assert seen["missing"]["context"]["correlation_id"] == "mcp-1"
        assert seen["forbidden"]["error"] == "FORBIDDEN" and seen["forbidden"]["success"] is False
        # Without a valid key the endpoint answers 401 before MCP is involved.
        r = httpx.post(srv.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert r.status_code == 401 and r.json()["adcp_error"]["code"] == "AUTH_MISSING"
        # GET (an SSE stream) is not offered: the transport is stateless JSON.
        g = httpx.get(srv.url + "/mcp", headers={"Authorization": f"Bearer {srv.agent_token}"})
        assert g.status_code == 405, g.text
