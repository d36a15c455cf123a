"""`warden log key|prove|check`, and exports that verify offline with only the
checkpoint key (and fail on any change), through the real CLI on a SQLite data dir."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import service_client, warden_cli, write_key
from jsonschema import Draft202012Validator
from sqlalchemy import create_engine, text

from warden.cli_output import cli_schema
from warden.runtime import Runtime
from warden.settings import Settings


def _warden(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return warden_cli(cwd or Path.cwd(), *args)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("logcli")
    d = root / "data"
    write_key(d / "ikm.key")
    rt = Runtime.start(Settings(data_dir=d))
    sids = []
    for agent in ("agent-a", "agent-b"):
        c = service_client(rt, agent_id=agent)
        c.hello()
        c.call("steps/sessionStart", {})
        assert "result" in c.tool_call("read_file", {"path": "/tmp/x"})
        sids.append(c.session_id)
        assert rt.tlog is not None
        rt.tlog.checkpoint()
    rt.close()
    engine = create_engine(f"sqlite:///{d / 'warden.db'}")
    with engine.connect() as conn:
        notes = [r[0] for r in conn.execute(text("SELECT note FROM log_checkpoints ORDER BY 1"))]
        sizes = [
            int(r[0])
            for r in conn.execute(text("SELECT tree_size FROM log_checkpoints ORDER BY 1"))
        ]
    engine.dispose()
    vkey = _warden("log", "key", "--data-dir", str(d)).stdout.strip()
    return {"root": root, "dir": d, "sids": sids, "notes": notes, "sizes": sizes, "vkey": vkey}


def test_log_key_json(data: dict[str, Any]) -> None:
    proc = _warden("log", "key", "--data-dir", str(data["dir"]), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc == {"origin": data["vkey"].split("+")[0], "vkey": data["vkey"]}
    missing = _warden("log", "key", "--data-dir", str(data["root"] / "nowhere"), "--json")
    assert missing.returncode == 2 and missing.stdout == "" and missing.stderr


def test_prove_and_check_offline(data: dict[str, Any]) -> None:
    root, d = data["root"], data["dir"]
    old_size, size = data["sizes"][-2], data["sizes"][-1]
    (root / "new.cp").write_text(data["notes"][-1])
    (root / "old.cp").write_text(data["notes"][-2])
    schema = Draft202012Validator(cli_schema("log-check"))
    inc = _warden("log", "prove", "--index", "2", "--size", str(size), "--data-dir", str(d))
    assert inc.returncode == 0, inc.stderr
    (root / "inc.json").write_text(inc.stdout)
    ok = _warden("log", "check", str(root / "inc.json"), "--checkpoint", str(root / "new.cp"),
                 "--log-key", data["vkey"], "--json")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    schema.validate(doc)
    assert (doc["ok"], doc["kind"], doc["index"], doc["size"]) == (True, "inclusion", 2, size)
    forged = json.loads(inc.stdout)
    forged["index"] = 3
    (root / "forged.json").write_text(json.dumps(forged))
    bad = _warden("log", "check", str(root / "forged.json"), "--checkpoint", str(root / "new.cp"),
                  "--log-key", data["vkey"], "--json")  # fmt: skip
    assert bad.returncode == 1
    schema.validate(json.loads(bad.stdout))
    con = _warden("log", "prove", "--from", str(old_size), "--to", str(size), "--data-dir", str(d))
    (root / "con.json").write_text(con.stdout)
    ok = _warden("log", "check", str(root / "con.json"), "--checkpoint", str(root / "new.cp"),
                 "--old-checkpoint", str(root / "old.cp"), "--log-key", data["vkey"])  # fmt: skip
    assert ok.returncode == 0 and "consistency proof verifies" in ok.stdout
    # A checkpoint signed by another key is bad input (exit 2), not a failed proof.
    other = data["vkey"].split("+")[0] + "+00000000+" + data["vkey"].split("+", 2)[2]
    assert _warden("log", "check", str(root / "inc.json"), "--checkpoint", str(root / "new.cp"),
                   "--log-key", other).returncode == 2  # fmt: skip
    assert _warden("log", "prove", "--index", "1", "--data-dir", str(d)).returncode == 2


def test_check_reports_findings_as_documents_and_names_bad_input(data: dict[str, Any]) -> None:
    root, d, size = data["root"], data["dir"], data["sizes"][-1]
    schema = Draft202012Validator(cli_schema("log-check"))
    good = root / "check-new.cp"
    good.write_text(data["notes"][-1])
    inc = _warden("log", "prove", "--index", "1", "--size", str(size), "--data-dir", str(d))
    assert inc.returncode == 0, inc.stderr
    proof = root / "check-inc.json"
    proof.write_text(inc.stdout)

    def check(doc: Path, cp: Path = good, *extra: str) -> subprocess.CompletedProcess[str]:
        return _warden("log", "check", str(doc), "--checkpoint", str(cp),
                       "--log-key", data["vkey"], "--json", *extra)  # fmt: skip

    # A checkpoint whose body was altered under its signature: a finding, in the document.
    lines = data["notes"][-1].split("\n")
    lines[2] = base64.b64encode(b"\x00" * 32).decode()
    tampered = root / "check-tampered.cp"
    tampered.write_text("\n".join(lines))
    got = check(proof, tampered)
    assert got.returncode == 1, got.stderr
    doc = json.loads(got.stdout)
    schema.validate(doc)
    assert (doc["ok"], doc["kind"], doc["reason"], doc["size"]) == (
        False, "inclusion", "checkpoint_signature", None,
    )  # fmt: skip
    assert str(tampered) in doc["message"] and "does not verify" in doc["message"]
    # A leaf file that is not the proven leaf: a finding too.
    other = root / "check-leaf.json"
    other.write_bytes(b"{}")
    got = check(proof, good, "--leaf", str(other))
    assert got.returncode == 1 and json.loads(got.stdout)["reason"] == "leaf_mismatch"
    schema.validate(json.loads(got.stdout))

    # Unusable input: exit 2, nothing on stdout, the file and the field named.
    base = json.loads(inc.stdout)
    cases: list[tuple[str, str]] = [
        ("{not json", "not JSON (Expecting property name"),
        (json.dumps({**base, "proof": "notalist"}),
         'proof: a list of base64 hashes, got "notalist"'),
        (json.dumps({**base, "proof": ["@@@@"]}), "proof[0]: not standard base64"),
        (json.dumps({**base, "proof": ["AAAA"]}),
         "proof[0]: a SHA-256 hash is 32 bytes, this is 3"),
        (json.dumps({k: v for k, v in base.items() if k != "size"}), "size: missing"),
        (json.dumps({**base, "index": "2"}), 'index: a non-negative integer, got "2"'),
        (json.dumps([1]), "a proof document is an object"),
    ]  # fmt: skip
    bad = root / "check-bad.json"
    for body, why in cases:
        bad.write_text(body)
        got = check(bad)
        assert (got.returncode, got.stdout) == (2, ""), (body, got.stdout)
        assert f"the proof {bad}: {why}" in got.stderr, (body, got.stderr)
    missing = check(proof, good, "--leaf", str(root / "no-such-leaf"))
    assert (
        missing.returncode == 2
        and f"cannot read the --leaf {root / 'no-such-leaf'}" in missing.stderr
    )
    broken = root / "check-broken.cp"
    broken.write_text("not a note")
    got = check(proof, broken)
    assert got.returncode == 2 and f"--checkpoint {broken}: not a signed note" in got.stderr
    # prove names the options out of range and the log's size.
    got = _warden("log", "prove", "--index", "5000", "--size", "5001", "--data-dir", str(d))
    assert got.returncode == 2
    assert "--index 5000 --size 5001: leaf index 5000 is outside the tree of size" in got.stderr
    got = _warden("log", "prove", "--from", "3", "--to", "2", "--data-dir", str(d))
    assert got.returncode == 2
    assert "--from 3 --to 2: no consistency proof from size 3 to size 2" in got.stderr


def _export(data: dict[str, Any], name: str, *extra: str) -> list[dict[str, Any]]:
    out = data["root"] / name
    r = _warden("export", "--data-dir", str(data["dir"]), "--out", str(out), *extra)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in out.read_text().splitlines()]


def _verify_offline(data: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    alone = data["root"] / "offline"
    alone.mkdir(exist_ok=True)
    f = alone / "x.jsonl"
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    # Only the public checkpoint key: no data directory, no IKM.
    r = _warden("verify", str(f), "--no-signatures", "--log-key", data["vkey"], "--json",
                "--data-dir", str(alone / "none"), cwd=alone)  # fmt: skip
    doc: dict[str, Any] = json.loads(r.stdout)
    assert r.returncode == (0 if doc["ok"] else 1), r.stderr
    return doc


def test_a_whole_export_verifies_offline_and_fails_on_any_change(data: dict[str, Any]) -> None:
    records = _export(data, "all.jsonl")
    doc = _verify_offline(data, records)
    assert doc["ok"], doc
    assert doc["log"]["checkpoint_signatures"] and doc["log"]["leaves"] >= 6
    log_rec = next(r for r in records if r["kind"] == "log")
    edited_event = json.loads(json.dumps(records))
    for r in edited_event:
        if r["kind"] == "log":
            r["events"][0][1] = r["events"][0][1].replace('"kind"', '"kind" ')
    assert _verify_offline(data, edited_event)["failure"]["reason"] == "log_mismatch"
    moved = json.loads(json.dumps(records))
    for r in moved:
        if r["kind"] == "log":
            sid = data["sids"][0]
            r["indexes"][sid] = [i + 1 if i is not None else None for i in r["indexes"][sid]]
    assert _verify_offline(data, moved)["ok"] is False
    resigned = json.loads(json.dumps(records))
    for r in resigned:
        if r["kind"] == "log":
            lines = r["checkpoint"].split("\n")
            lines[1] = str(int(lines[1]) - 1)
            r["checkpoint"] = "\n".join(lines)
    assert _verify_offline(data, resigned)["failure"]["reason"] == "log_signature"
    assert log_rec["cosignatures"] == []


def test_a_session_export_proves_its_leaves(data: dict[str, Any]) -> None:
    records = _export(data, "one.jsonl", "--session", data["sids"][0])
    doc = _verify_offline(data, records)
    assert doc["ok"], doc
    assert doc["log"]["leaves"] >= 2
    forged = json.loads(json.dumps(records))
    for r in forged:
        if r["kind"] == "log":
            key = next(iter(r["proofs"]))
            r["proofs"][key] = list(reversed(r["proofs"][key]))
    failure = _verify_offline(data, forged)["failure"]
    assert failure["reason"] == "log_mismatch"
