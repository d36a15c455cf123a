"""The log's sync hashes leaves in batches (decision 1122): the tree it builds over more
leaves than one batch is the tree of every leaf, and a gap inside a later batch is
still found at its index."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import service_client
from sqlalchemy import text

from warden.runtime import Runtime
from warden.tlog import service as tlog_service
from warden.tlog.merkle import MerkleTree, leaf_hash
from warden.tlog.service import LogForked, TransparencyLog


def _runtime_with_leaves(make: Callable[..., Runtime], steps: int) -> Runtime:
    rt = make()
    c = service_client(rt, agent_id="agent-a")
    c.hello()
    c.call("steps/sessionStart", {})
    for i in range(steps):
        assert "result" in c.tool_call("read_file", {"path": f"/tmp/{i}"})
    return rt


@pytest.fixture
def logged(
    make_backend_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> Runtime:
    """A runtime whose log holds more leaves than three batches of 4."""
    monkeypatch.setattr(tlog_service, "_HASH_BATCH", 4)
    rt = _runtime_with_leaves(make_backend_runtime, 9)
    assert rt.tlog is not None
    return rt


def _stored(rt: Runtime) -> list[bytes]:
    with rt.store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT log_index, entry FROM entries UNION ALL "
                "SELECT log_index, event FROM log_events ORDER BY 1"
            )
        ).all()
    return [r[1].encode() for r in rows]


def test_a_sync_over_several_batches_builds_the_tree_of_every_leaf(logged: Runtime) -> None:
    rt = logged
    assert rt.tlog is not None
    leaves = _stored(rt)
    assert len(leaves) > 3 * 4
    fresh = TransparencyLog(rt.store.engine, rt.tlog.signer)
    assert fresh.sync() == len(leaves)
    whole = MerkleTree(leaf_hash(leaf) for leaf in leaves)
    for size in range(1, len(leaves) + 1):
        assert fresh.tree.root(size) == whole.root(size)


def test_a_gap_in_a_later_batch_is_found_at_its_index(logged: Runtime) -> None:
    rt = logged
    assert rt.tlog is not None
    with rt.store.engine.begin() as conn:
        victim = conn.execute(text("SELECT MAX(log_index) FROM entries")).scalar_one() - 2
        assert victim > 2 * 4
        deleted = conn.execute(text("DELETE FROM entries WHERE log_index = :i"), {"i": victim})
        assert deleted.rowcount == 1
    fresh = TransparencyLog(rt.store.engine, rt.tlog.signer)
    with pytest.raises(LogForked, match=f"leaf index {victim} is missing"):
        fresh.sync()
    assert fresh.tree.size == victim
