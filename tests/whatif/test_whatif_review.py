"""`warden whatif` refuses what would let a CI gate pass without checking anything (a
fresh user's review): an inverted window, an export that does not verify, an unwritable
--html, a --current that is not the recorded bundle, options that exclude each other; an
unfaithful replay fails --fail-on unless --allow-unfaithful; empty windows warn; the
output speaks in counts, not Python reprs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import AGENTDOJO_POLICY, service_client, write_key
from dojo import send_money_candidate, valid

from warden.policy.bundle import load_bundle
from warden.runtime import Runtime
from warden.settings import Settings

NEW_PAYEE = {"recipient": "XX00NEWPAYEE", "amount": 10, "subject": "rent", "date": "2026-12-01"}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small recorded history (a transfer the bundle asks for, a balance it allows)
    and its `warden export` (server stopped)."""
    data = tmp_path_factory.mktemp("review") / "data"
    key = write_key(data / "ikm.key")
    rt = Runtime.start(
        Settings(data_dir=data, policy=AGENTDOJO_POLICY, key_file=key, policy_poll_interval_s=0)
    )
    try:
        client = service_client(rt)
        client.hello()
        for tool, args in (("send_money", NEW_PAYEE), ("get_balance", {})):
            client.call(
                "steps/toolCallRequest",
                {"tool": {"name": tool}, "arguments": {k: {"value": v} for k, v in args.items()}},
            )
    finally:
        rt.close()
    out = data.parent / "history.jsonl"
    exported = cli("export", "--data-dir", str(data), "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    return data, out


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    from typer.testing import CliRunner

    from warden.cli import app

    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return subprocess.CompletedProcess(args, res.exit_code, res.stdout, res.stderr)


def whatif(*args: str) -> subprocess.CompletedProcess[str]:
    return cli("whatif", *args)


def store_args(history: tuple[Path, Path]) -> list[str]:
    return ["--policy", str(AGENTDOJO_POLICY), "--data-dir", str(history[0])]


# -- 1: the window ----------------------------------------------------------------------


def test_since_after_until_is_refused(history: tuple[Path, Path]) -> None:
    for extra in ([], ["--json"]):
        proc = whatif(
            *store_args(history),
            "--since",
            "2026-12-02T00:00:00Z",
            "--until",
            "2026-12-01T00:00:00Z",
            "--fail-on",
            "loosen",
            *extra,
        )
        assert proc.returncode == 2
        assert proc.stdout == ""  # --json: no document when the command cannot run
        assert "--since 2026-12-02T00:00:00Z is after --until 2026-12-01T00:00:00Z" in (
            " ".join(proc.stderr.split())
        )


def test_an_empty_window_or_unknown_agent_warns(history: tuple[Path, Path]) -> None:
    full = valid(json.loads(whatif(*store_args(history), "--json").stdout))
    assert full["decisions"] > 0 and full["warnings"] == []
    for extra, said in (
        (["--agent", "nobody"], "no recorded decisions of agent 'nobody'"),
        (["--since", "2999-01-01T00:00:00Z"], "no recorded decisions in the --since/--until"),
    ):
        proc = whatif(*store_args(history), "--json", *extra)
        assert proc.returncode == 0, proc.stderr
        doc = valid(json.loads(proc.stdout))
        assert doc["decisions"] == 0
        assert any(said in w for w in doc["warnings"]), doc["warnings"]
        assert "warning" in proc.stderr and said in " ".join(proc.stderr.split())


# -- 2: the export is verified; --fail-on needs a faithful replay ------------------------


def test_an_export_that_does_not_verify_is_refused(
    history: tuple[Path, Path], tmp_path: Path
) -> None:
    _, export = history
    lines = export.read_text().splitlines(keepends=True)
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds[-1] == "manifest" and "log" in kinds
    broken = {
        "truncated": "".join(lines[: len(lines) // 2]),
        "empty": "",
        "bogus": '{"kind":"bogus"}\n',
        "no-log": "".join(line for line, k in zip(lines, kinds, strict=True) if k != "log"),
    }
    for name, text in broken.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(text)
        proc = whatif("--policy", str(AGENTDOJO_POLICY), "--export", str(path), "--json")
        assert proc.returncode == 2, (name, proc.stdout)
        assert proc.stdout == "", name
        err = " ".join(proc.stderr.split())
        assert f"the export {path}" in err and "refusing to replay it" in err, (name, err)
    # The whole export verifies (its signatures too with --key-file) and replays.
    ok = whatif(
        "--policy",
        str(AGENTDOJO_POLICY),
        "--export",
        str(export),
        "--current",
        str(AGENTDOJO_POLICY),
        "--key-file",
        str(history[0] / "ikm.key"),
        "--json",
    )
    assert ok.returncode == 0, ok.stderr
    assert valid(json.loads(ok.stdout))["warnings"] == []
    # A tampered signature is caught with the key (and not without it: the warning says).
    tampered = tmp_path / "tampered.jsonl"
    manifest = json.loads(lines[-1])
    manifest["signature"]["value"] = "A" * len(manifest["signature"]["value"])
    tampered.write_text("".join(lines[:-1]) + json.dumps(manifest) + "\n")
    args = ["--policy", str(AGENTDOJO_POLICY), "--export", str(tampered), "--json"]
    assert whatif(*args, "--key-file", str(history[0] / "ikm.key")).returncode == 2
    unsigned = whatif(*args, "--current", str(AGENTDOJO_POLICY))
    assert unsigned.returncode == 0
    assert any("signatures were not checked" in w for w in json.loads(unsigned.stdout)["warnings"])


def test_fail_on_fails_an_unfaithful_replay_unless_allowed(
    history: tuple[Path, Path], tmp_path: Path
) -> None:
    """Without --current an export's decisions cannot be checked: the candidate (the
    recorded bundle under another version) changes nothing, but the gate must not pass
    on guesses."""
    text = AGENTDOJO_POLICY.read_text(encoding="utf-8")
    assert text.count('version: "2026.11.29.2"') == 1
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(text.replace('version: "2026.11.29.2"', 'version: "renamed"'))
    base = ["--policy", str(renamed), "--export", str(history[1]), "--json"]
    proc = whatif(*base, "--fail-on", "loosen")
    assert proc.returncode == 1
    doc = valid(json.loads(proc.stdout))
    assert doc["ok"] is False and doc["changes"]["total"] == 0
    assert doc["faithfulness"]["faithful"] is False
    assert any("not faithful" in w and "--allow-unfaithful" in w for w in doc["warnings"])
    allowed = whatif(*base, "--fail-on", "loosen", "--allow-unfaithful")
    assert allowed.returncode == 0, allowed.stderr
    assert valid(json.loads(allowed.stdout))["ok"] is True
    assert "not faithful" in allowed.stderr
    # With the recorded bundle the replay is faithful and the gate passes.
    faithful = whatif(*base, "--fail-on", "loosen", "--current", str(AGENTDOJO_POLICY))
    assert faithful.returncode == 0, faithful.stderr


# -- 3: --html is checked before the replay ----------------------------------------------


def test_an_unwritable_html_path_is_refused(history: tuple[Path, Path], tmp_path: Path) -> None:
    for path, why in (
        (tmp_path / "no" / "such" / "r.html", "no directory"),
        (tmp_path, "directory"),
    ):
        proc = whatif(*store_args(history), "--html", str(path), "--fail-on", "loosen")
        assert proc.returncode == 2, proc.stdout
        assert proc.stdout == ""  # refused before the replay: no report
        assert "Traceback" not in proc.stderr and why in proc.stderr
        assert "cannot write the HTML report" in " ".join(proc.stderr.split())


# -- 4: --current must be the recorded bundle ---------------------------------------------


def test_a_current_bundle_that_is_not_the_recorded_one_is_refused(
    history: tuple[Path, Path], tmp_path: Path
) -> None:
    other = send_money_candidate(tmp_path)
    proc = whatif(
        "--policy", str(other), "--export", str(history[1]), "--current", str(other), "--json"
    )
    assert proc.returncode == 2 and proc.stdout == ""
    err = "".join(proc.stderr.split())  # digests may be folded across lines
    assert load_bundle(other).ref.digest in err
    assert load_bundle(AGENTDOJO_POLICY).ref.digest in err


# -- 5: people read counts, not Python reprs ----------------------------------------------


def test_human_output_and_html_have_no_python_reprs(
    history: tuple[Path, Path], tmp_path: Path
) -> None:
    page = tmp_path / "r.html"
    proc = whatif(*store_args(history), "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "{'" not in out and "None" not in out
    # Chain name and count, comma-separated (the agents' registration chain and the desk's).
    assert "not replayed: warden/agents 1, warden/approval 1" in out
    html = page.read_text()
    assert "No gate (--fail-on not given)" in html and "--fail-on None" not in html
    assert whatif(*store_args(history), "--html", str(page), "--fail-on", "any").returncode == 0
    assert 'Gate (--fail-on any): <span class="good">ok</span>' in page.read_text()
    shadow = whatif("--shadow", "--data-dir", str(history[0]))
    assert shadow.returncode == 0 and "{" not in shadow.stdout
    assert "candidates: none" in shadow.stdout


# -- 6: shadow mode and exclusive options --------------------------------------------------


def test_shadow_reports_faithfulness_as_not_applicable(history: tuple[Path, Path]) -> None:
    proc = whatif("--shadow", "--data-dir", str(history[0]), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = valid(json.loads(proc.stdout))
    assert doc["faithfulness"] is None


def test_options_that_exclude_each_other_are_refused(history: tuple[Path, Path]) -> None:
    data, export = history
    cases = [
        (["--shadow", "--policy", str(AGENTDOJO_POLICY), "--data-dir", str(data)], "--shadow"),
        (
            ["--policy", str(AGENTDOJO_POLICY), "--export", str(export), "--data-dir", str(data)],
            "--data-dir",
        ),
        (
            [
                "--policy",
                str(AGENTDOJO_POLICY),
                "--export",
                str(export),
                "--database-url",
                "sqlite:///x.db",
            ],
            "--database-url",
        ),
    ]
    for args, named in cases:
        proc = whatif(*args, "--json")
        assert proc.returncode == 2, args
        assert proc.stdout == "" and named in proc.stderr
