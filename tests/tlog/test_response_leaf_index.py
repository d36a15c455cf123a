"""A decision's ACS response carries its entry's transparency-log leaf index in
``policy_data.log_index`` (issue 17 item 3), on both backends and through the server's
group commit: the index is the one the stored entry got, the response stays signed and
schema-valid, and the index's inclusion proof proves exactly that entry's bytes."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

from conftest import assert_valid_response, service_client
from sqlalchemy import text

from warden.runtime import Runtime
from warden.server.app import create_app
from warden.store.group_commit import GroupCommitter
from warden.tlog.merkle import leaf_hash, verify_inclusion


def _entry_at(rt: Runtime, session_id: str, step_id: str) -> tuple[int, str, str]:
    with rt.store.engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT log_index, entry, response FROM entries "
                "WHERE session_id = :s AND step_id = :r"
            ),
            {"s": session_id, "r": step_id},
        ).one()
    return int(row[0]), str(row[1]), str(row[2])


def _proves(rt: Runtime, index: int, entry: str) -> bool:
    assert rt.tlog is not None
    cp = rt.tlog.checkpoint()
    doc = rt.tlog.inclusion(index, cp.tree_size)
    return verify_inclusion(
        index,
        cp.tree_size,
        leaf_hash(entry.encode()),
        [base64.b64decode(p) for p in doc["proof"]],
        bytes.fromhex(cp.root_hash),
    )


def test_each_decision_names_its_leaf(make_backend_runtime: Callable[..., Runtime]) -> None:
    rt = make_backend_runtime()
    c = service_client(rt)
    c.hello()
    start = c.call("steps/sessionStart", {})
    seen: list[int] = []
    for response in [start] + [c.tool_call("read_file", {"path": f"/t/{i}"}) for i in range(3)]:
        assert_valid_response(response)  # signed and verified by the client, schema-valid
        result = response["result"]
        index = result["policy_data"]["log_index"]
        stored_index, entry, stored = _entry_at(rt, c.session_id, result["request_id"])
        assert index == stored_index
        assert stored == _dumps(response)  # what was sent is what was stored
        assert _proves(rt, index, entry)
        seen.append(index)
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    # Another entry's index does not prove this entry.
    _, entry, _ = _entry_at(rt, c.session_id, start["result"]["request_id"])
    assert not _proves(rt, seen[-1], entry)


def test_group_commit_gives_each_response_its_own_leaf(
    make_backend_runtime: Callable[..., Runtime],
) -> None:
    rt = make_backend_runtime()
    create_app(rt)  # the server's wiring, as `warden serve` builds it
    clients = [service_client(rt, agent_id=f"agent-{i}") for i in range(4)]
    for c in clients:
        c.hello()
    committer = GroupCommitter(rt.store)

    async def all_at_once() -> list[dict[str, Any]]:
        bodies = [c.envelope("steps/sessionStart", {}) for c in clients]  # four sessions: one batch
        return await asyncio.gather(
            *(rt.acs.handle_async(_dumps(b).encode(), committer) for b in bodies)
        )

    try:
        answers = asyncio.run(all_at_once())
    finally:
        committer.close()
    indexes = []
    for c, response in zip(clients, answers, strict=True):
        result = response["result"]
        assert result["decision"] == "allow", response
        stored_index, entry, stored = _entry_at(rt, c.session_id, result["request_id"])
        assert result["policy_data"]["log_index"] == stored_index
        assert stored == _dumps(response)
        assert _proves(rt, stored_index, entry)
        indexes.append(stored_index)
    assert len(set(indexes)) == 4


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
