"""The AdCP data these tests read from the repository (the seed envelope, the storyboards)
are verbatim copies of ../shared: checked byte for byte whenever ../shared is at hand."""

from __future__ import annotations

import pytest
from adcp_helpers import COMPLIANCE, SEED, SHARED_COMPLIANCE
from conftest import SHARED


def test_the_seed_copy_equals_the_seed() -> None:
    originals = sorted((SHARED / "seeds").glob("001_*.txt")) if SHARED.is_dir() else []
    if not originals:
        pytest.skip("../shared is not part of this checkout (CI's clean clone)")
    assert [p.name for p in originals] == [SEED.name]
    assert SEED.read_bytes() == originals[0].read_bytes()


def test_the_storyboard_copies_equal_the_shared_tree() -> None:
    if not SHARED_COMPLIANCE.is_dir():
        pytest.skip("../shared is not part of this checkout (CI's clean clone)")
    copies = sorted(p for p in COMPLIANCE.rglob("*") if p.is_file())
    assert len(copies) >= 13
    for path in copies:
        rel = path.relative_to(COMPLIANCE)
        assert path.read_bytes() == (SHARED_COMPLIANCE / rel).read_bytes(), rel
