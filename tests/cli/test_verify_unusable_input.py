"""``warden verify`` on input it cannot use (issue 16 fresh-user review, decision 915):
a file that is no audit export and a ``--checkpoint`` that is no signed checkpoint are
bad input (exit 2, a message on stderr, nothing on stdout, docs/cli-json.md), not
findings. They were exit 1 with ``record_hash_mismatch``, ``chain_mismatch`` and
``log_signature``. A damaged line inside a real export is still a finding."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from warden.cli import app as cli_app
from warden.runtime import Runtime

runner = CliRunner()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("hello\n", "is not a Warden audit export: "),
        ('{"x":1}\n', "its first record has no kind"),
        ("[1, 2]\n", "is not a Warden audit export"),
        ("\n\n", "it holds no record"),
    ],
    ids=["not_json", "no_kind", "not_an_object", "empty"],
)
def test_a_file_that_is_no_export_is_bad_input(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(text, encoding="utf-8")
    out = runner.invoke(cli_app, ["verify", str(path), "--no-signatures", "--json"])
    assert out.exit_code == 2, out.output
    assert out.stdout == ""
    assert said in out.stderr


def test_a_damaged_line_inside_an_export_is_still_a_finding(
    make_runtime: Callable[..., Runtime], tmp_path: Path
) -> None:
    rt = make_runtime()
    data = str(rt.settings.data_dir)
    export = tmp_path / "all.jsonl"
    assert (
        runner.invoke(cli_app, ["export", "--out", str(export), "--data-dir", data]).exit_code == 0
    )
    lines = export.read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 2
    export.write_text("\n".join([lines[0], "hello", *lines[1:]]) + "\n", encoding="utf-8")
    out = runner.invoke(cli_app, ["verify", str(export), "--data-dir", data, "--json"])
    assert out.exit_code == 1, out.output
    assert json.loads(out.stdout)["failure"]["reason"] == "record_hash_mismatch"


@pytest.mark.parametrize("text", ["hello\n", "", "origin\n\n— origin AAAA\n"])
def test_a_checkpoint_that_is_no_signed_checkpoint_is_bad_input(
    make_runtime: Callable[..., Runtime], tmp_path: Path, text: str
) -> None:
    rt = make_runtime()
    kept = tmp_path / "kept.note"
    kept.write_text(text, encoding="utf-8")
    out = runner.invoke(
        cli_app,
        ["verify", "--data-dir", str(rt.settings.data_dir), "--checkpoint", str(kept), "--json"],
    )
    assert out.exit_code == 2, out.output
    assert out.stdout == ""
    assert "not a signed checkpoint" in out.stderr
