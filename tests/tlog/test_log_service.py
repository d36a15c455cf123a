"""The transparency log over a real store on both backends: every entry is a leaf with
a gapless index, checkpoints are signed C2SP notes whose roots the leaves reproduce,
proofs verify, and a tampered database is refused a new signature."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import service_client
from sqlalchemy import text

from warden.runtime import Runtime
from warden.tlog.merkle import MerkleTree, leaf_hash, verify_consistency, verify_inclusion
from warden.tlog.note import NoteVerifier, open_checkpoint
from warden.tlog.service import LogForked, TransparencyLog


@pytest.fixture
def make_runtime(make_backend_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    return make_backend_runtime


def _leaves(rt: Runtime) -> list[tuple[int, str]]:
    with rt.store.engine.connect() as conn:
        return [
            (int(r[0]), r[1])
            for r in conn.execute(
                text(
                    "SELECT log_index, entry FROM entries UNION ALL "
                    "SELECT log_index, event FROM log_events ORDER BY 1"
                )
            )
        ]


def _decide(rt: Runtime, n: int) -> None:
    c = service_client(rt, agent_id="agent-a")
    c.hello()
    c.call("steps/sessionStart", {})
    for i in range(n):
        assert "result" in c.tool_call("read_file", {"path": f"/tmp/{i}"})


def _b(s: str) -> bytes:
    import base64

    return base64.b64decode(s)


def test_every_entry_is_a_leaf_and_checkpoints_prove(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    tlog = rt.tlog
    assert tlog is not None
    verifier = NoteVerifier.from_vkey(tlog.signer.vkey())
    first = tlog.checkpoint()
    leaves = _leaves(rt)
    # The start and bundle load of this server are leaves already.
    types = [r[1] for r in leaves]
    assert any('"kind":"warden.start"' in t for t in types)
    assert any('"kind":"warden.bundle_load"' in t for t in types)
    _decide(rt, 5)
    second = tlog.checkpoint()
    leaves = _leaves(rt)
    assert [i for i, _ in leaves] == list(range(len(leaves)))  # global and gapless
    assert second.tree_size == len(leaves) > first.tree_size
    independent = MerkleTree(leaf_hash(e.encode()) for _, e in leaves)
    assert independent.root().hex() == second.root_hash
    cp = open_checkpoint(second.note, verifier, tlog.origin)
    assert (cp.size, cp.root.hex()) == (second.tree_size, second.root_hash)
    proof = tlog.consistency(first.tree_size, second.tree_size)
    assert verify_consistency(
        first.tree_size,
        second.tree_size,
        bytes.fromhex(first.root_hash),
        cp.root,
        [_b(p) for p in proof["proof"]],
    )
    for index, entry in leaves:
        doc = tlog.inclusion(index, cp.size)
        assert _b(doc["leaf_hash"]) == leaf_hash(entry.encode())
        assert verify_inclusion(
            index, cp.size, leaf_hash(entry.encode()), [_b(p) for p in doc["proof"]], cp.root
        )
    # No new leaves: the same checkpoint is returned, not a new one.
    assert tlog.checkpoint() == second


@pytest.mark.parametrize("tamper", ["edit", "delete", "renumber"])
def test_a_tampered_store_gets_no_new_signature(
    make_runtime: Callable[..., Runtime], tamper: str
) -> None:
    rt = make_runtime()
    _decide(rt, 3)
    assert rt.tlog is not None
    cp = rt.tlog.checkpoint()
    with rt.store.engine.connect() as conn:
        victim = conn.execute(text("SELECT MIN(log_index) FROM entries")).scalar_one()
    assert victim < cp.tree_size - 1
    sql: dict[str, Any] = {
        "edit": "UPDATE entries SET entry = entry || ' ' WHERE log_index = :i",
        "delete": "DELETE FROM entries WHERE log_index = :i",
        "renumber": "UPDATE entries SET log_index = log_index + 1000 WHERE log_index = :i",
    }
    with rt.store.engine.begin() as conn:
        assert conn.execute(text(sql[tamper]), {"i": victim}).rowcount == 1
    fresh = TransparencyLog(rt.store.engine, rt.tlog.signer)
    with pytest.raises(LogForked):
        fresh.checkpoint()
