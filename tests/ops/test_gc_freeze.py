"""``gc_freeze`` (decision 330): a started runtime leaves the start-up heap in the
garbage collector's permanent generation, unless told not to. Each case runs in a
process of its own, since freezing is process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PROBE = """
import gc, json, sys
from pathlib import Path
from warden.runtime import Runtime
from warden.settings import Settings
before = gc.get_freeze_count()
rt = Runtime.start(Settings(data_dir=Path(sys.argv[1]), policy=Path(sys.argv[2])))
try:
    print(json.dumps({"before": before, "after": gc.get_freeze_count()}))
finally:
    rt.close()
"""


def _freeze_counts(tmp_path: Path, env_value: str | None) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
    if env_value is not None:
        env["WARDEN_GC_FREEZE"] = env_value
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            str(tmp_path / "data"),
            str(ROOT / "examples" / "policies" / "default.yaml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_started_runtime_freezes_the_start_up_heap_by_default(tmp_path: Path) -> None:
    counts = _freeze_counts(tmp_path, None)
    assert counts["before"] == 0
    # Tens of thousands of objects: the modules, the bundle, the validators.
    assert counts["after"] > 10_000


@pytest.mark.parametrize("value", ["false", "0"])
def test_gc_freeze_off_leaves_the_collector_alone(tmp_path: Path, value: str) -> None:
    assert _freeze_counts(tmp_path, value) == {"before": 0, "after": 0}
