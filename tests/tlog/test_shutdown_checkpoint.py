"""`warden serve` stopped with SIGTERM (what `kill`, systemd and container runtimes send)
signs the shutdown checkpoint before it exits, as SIGINT does: the newest decisions are
covered by a signed checkpoint, so deleting them is caught (decision 365)."""

from __future__ import annotations

import signal
from pathlib import Path

from conftest import start_server
from sqlalchemy import create_engine, text


def test_sigterm_signs_the_shutdown_checkpoint(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "srv")
    try:
        c = srv.client()
        c.hello()
        c.call("steps/sessionStart", {})
        last = c.tool_call("read_file", {"path": "/tmp/x"})["result"]["policy_data"]["log_index"]
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(30) == 128 + signal.SIGTERM
    finally:
        srv.stop()
    engine = create_engine(srv.database_url)
    with engine.connect() as conn:
        newest = conn.execute(text("SELECT MAX(tree_size) FROM log_checkpoints")).scalar_one()
        leaves = conn.execute(
            text(
                "SELECT COUNT(*) FROM (SELECT log_index FROM entries "
                "UNION ALL SELECT log_index FROM log_events) AS l"
            )
        ).scalar_one()
    engine.dispose()
    # Every leaf, the last decision's included, is under the checkpoint signed at shutdown.
    assert newest == leaves and newest > last


def test_verify_warns_about_leaves_no_checkpoint_covers(tmp_path: Path) -> None:
    """With every stored checkpoint deleted (and the log edited to match), nothing in the
    database can show the history was rewritten: `warden verify` passes, as it must, but
    says on stderr that no checkpoint covers the log; a covered log gets no warning."""
    import subprocess
    import sys

    srv = start_server(tmp_path / "srv")
    try:
        c = srv.client()
        c.hello()
        c.call("steps/sessionStart", {})
        srv.proc.send_signal(signal.SIGTERM)
        srv.proc.wait(30)
    finally:
        srv.stop()

    def verify() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "warden", "verify", "--data-dir", str(srv.data_dir)],
            capture_output=True,
            text=True,
            check=False,
        )

    covered = verify()
    assert covered.returncode == 0, covered.stderr
    assert "warning" not in covered.stderr
    engine = create_engine(srv.database_url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM log_checkpoints"))
    engine.dispose()
    bare = verify()
    assert bare.returncode == 0, bare.stderr
    assert "no stored checkpoint covers the log" in bare.stderr
    assert "--checkpoint FILE" in bare.stderr
