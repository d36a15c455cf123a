"""``warden verify-record`` / ``warden verify-bundle`` end to end through Typer's CliRunner.

The commands are registered on a local Typer app exactly as ``warden.cli`` does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import typer
from conftest import ROOT, asset
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from warden.cli_records import verify_bundle_cmd, verify_record_cmd
from warden.kla import record_digest, sign_digest

app = typer.Typer()
app.command("verify-record")(verify_record_cmd)
app.command("verify-bundle")(verify_bundle_cmd)
runner = CliRunner()

BASIC = ROOT / "src" / "warden" / "schemas" / "kla" / "examples" / "basic-read.json"
BASIC_DIGEST = "sha256:14942f584b73733068adc207e1916abdb39523a4607574d4ba31c9ade7e0ff01"
VECTORS = json.loads(asset("kla/rfc8032_vectors.json").read_text())
KEY1 = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(VECTORS["test1"]["secret_key"]))
KEY2 = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(VECTORS["test2"]["secret_key"]))
JWKS = asset("kla/jwks_two_keys.json")
PEM1 = asset("kla/pem_dir/rfc8032-test1.pem")


def run(*args: str | Path) -> tuple[int, str, str]:
    result = runner.invoke(app, [str(a) for a in args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def _sig(key: Ed25519PrivateKey = KEY1, digest: str = BASIC_DIGEST) -> str:
    return sign_digest(key, digest)


def test_ok_prints_the_digest() -> None:
    code, out, _ = run("verify-record", BASIC)
    assert code == 0
    assert BASIC_DIGEST in out and "req_action_demo_0001" in out


def test_ok_with_digest_and_signature() -> None:
    code, out, _ = run(
        "verify-record", BASIC, "--digest", BASIC_DIGEST, "--signature", _sig(),
        "--public-key", JWKS, "--kid", "rfc8032-test1",
    )  # fmt: skip
    assert code == 0, out
    assert "signature verified (kid rfc8032-test1)" in out
    code, _, _ = run("verify-record", BASIC, "--signature", _sig(), "--public-key", PEM1)
    assert code == 0
    pem_dir = asset("kla/pem_dir")
    code, _, _ = run(
        "verify-record", BASIC, "--signature", _sig(KEY2), "--public-key", pem_dir,
        "--kid", "rfc8032-test2",
    )  # fmt: skip
    assert code == 0


@pytest.mark.parametrize(
    ("name", "code", "words"),
    [
        ("request_missing_purpose.json", 3, "schema_invalid"),
        ("request_trace_id_all_zero.json", 3, "/correlation/trace_id"),
        ("request_currency_lowercase.json", 3, "/amount/currency"),
        ("request_amount_float.json", 3, "/amount/value"),
        ("request_requested_at_not_rfc3339.json", 3, "date-time"),
        ("request_schema_version_2.json", 6, "unsupported_schema_version"),
        ("request_duplicate_key.json", 2, "duplicate"),
        ("request_truncated.json", 2, "invalid JSON"),
    ],
)
def test_record_exit_codes(name: str, code: int, words: str) -> None:
    got, _, err = run("verify-record", asset(f"kla/{name}"))
    assert got == code, err
    assert words in err


def test_changed_action_exits_4() -> None:
    code, _, err = run(
        "verify-record", asset("kla/request_action_edited.json"), "--digest", BASIC_DIGEST
    )
    assert code == 4
    assert "record_hash_mismatch" in err


@pytest.mark.parametrize(
    "args",
    [
        ("--signature", "WRONG_KEY", "--public-key", PEM1),
        ("--signature", "FLIPPED", "--public-key", PEM1),
        ("--signature", "WRONG_KEY", "--public-key", JWKS, "--kid", "rfc8032-test1"),
        ("--signature", "GOOD", "--public-key", JWKS, "--kid", "rfc8032-test9"),
    ],
)
def test_signature_failures_exit_5(args: tuple[str | Path, ...]) -> None:
    good = _sig()
    flipped = good[:5] + ("A" if good[5] != "A" else "B") + good[6:]
    subst = {"WRONG_KEY": _sig(KEY2), "FLIPPED": flipped, "GOOD": good}
    code, _, err = run("verify-record", BASIC, *[subst.get(str(a), a) for a in args])
    assert code == 5, err
    assert "signature_invalid" in err


@pytest.mark.parametrize(
    "args",
    [
        ("--digest", "sha256:ABC"),
        ("--signature", "x" * 86),  # no key
        ("--signature", "x" * 86, "--public-key", "KEYDIR/missing.pem"),
        ("--signature", "x" * 86, "--public-key", "KEYDIR/pem_private_key.pem"),
        ("--signature", "x" * 86, "--public-key", "KEYDIR/jwks_ec_p256.json"),
        ("--signature", "x" * 86, "--public-key", "KEYDIR/jwks_two_keys.json"),  # no --kid
    ],
)
def test_bad_input_exits_2(args: tuple[str, ...]) -> None:
    keydir = str(asset("kla"))
    code, _, err = run("verify-record", BASIC, *[a.replace("KEYDIR", keydir) for a in args])
    assert code == 2, err


def test_unreadable_file_exits_2(tmp_path: Path) -> None:
    code, _, err = run("verify-record", tmp_path / "missing.json")
    assert code == 2 and "cannot be read" in err
    code, _, _ = run("verify-record", tmp_path)
    assert code == 2


def test_record_file_is_left_byte_for_byte_untouched(tmp_path: Path) -> None:
    files = [tmp_path / "basic.json", tmp_path / "edited.json"]
    shutil.copyfile(BASIC, files[0])
    shutil.copyfile(asset("kla/request_action_edited.json"), files[1])
    before = {f: (f.read_bytes(), os.stat(f).st_mtime_ns) for f in files}
    assert run("verify-record", files[0], "--digest", BASIC_DIGEST)[0] == 0
    assert run("verify-record", files[1], "--digest", BASIC_DIGEST)[0] == 4
    assert {f: (f.read_bytes(), os.stat(f).st_mtime_ns) for f in files} == before
    assert sorted(tmp_path.iterdir()) == sorted(files)


def test_json_output() -> None:
    edited = asset("kla/request_action_edited.json")
    code, out, _ = run("verify-record", edited, "--digest", BASIC_DIGEST, "--json")
    assert code == 4
    doc = json.loads(out)
    assert doc["status"] == "record_hash_mismatch" and doc["ok"] is False
    assert doc["digest"] == record_digest(
        json.loads(asset("kla/request_action_edited.json").read_bytes())
    )


# --- verify-bundle -----------------------------------------------------------------------


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(asset("kla/bundle_clean"), copy)
    return copy


def test_bundle_ok(bundle: Path) -> None:
    code, out, err = run("verify-bundle", bundle)
    assert code == 0, err
    assert "4 records, 5 signatures checked, manifest signed" in out
    assert "--trusted-keys" in err  # warned: the bundle's own keys
    code, out, err = run("verify-bundle", bundle, "--trusted-keys", JWKS, "--require-signatures")
    assert code == 0 and "warning" not in err


def _edit_first_record(bundle: Path) -> None:
    lines = (bundle / "records.jsonl").read_text().splitlines()
    lines[0] = lines[0].replace("approve_credit_disposition", "approve_credit_increase")
    (bundle / "records.jsonl").write_text("\n".join(lines) + "\n")


def _drop_second_line(bundle: Path) -> None:
    lines = (bundle / "records.jsonl").read_text().splitlines()
    (bundle / "records.jsonl").write_text("\n".join(lines[:1] + lines[2:]) + "\n")


def _bad_signature(bundle: Path) -> None:
    lines = [json.loads(x) for x in (bundle / "records.jsonl").read_text().splitlines()]
    lines[1]["signature"] = sign_digest(KEY2, lines[1]["digest"])
    (bundle / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _schema_broken(bundle: Path) -> None:
    lines = [json.loads(x) for x in (bundle / "records.jsonl").read_text().splitlines()]
    lines[0]["record"]["amount"]["currency"] = "eur"
    (bundle / "records.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _future_bundle(bundle: Path) -> None:
    m = json.loads((bundle / "manifest.json").read_text())
    m["bundle_version"] = "9.0.0"
    (bundle / "manifest.json").write_text(json.dumps(m))


def _dangling_reference(bundle: Path) -> None:
    _drop_second_line(bundle)
    m = json.loads((bundle / "manifest.json").read_text())
    del m["records"][1], m["signature"], m["kid"]
    (bundle / "manifest.json").write_text(json.dumps(m))


def _missing_manifest(bundle: Path) -> None:
    (bundle / "manifest.json").unlink()


@pytest.mark.parametrize(
    ("tamper", "code", "words"),
    [
        (_edit_first_record, 4, "record_hash_mismatch records.jsonl:1"),
        (_drop_second_line, 4, "record_hash_mismatch manifest.json"),
        (_bad_signature, 5, "signature_invalid records.jsonl:2"),
        (_schema_broken, 3, "schema_invalid records.jsonl:1 at /record/amount/currency"),
        (_future_bundle, 6, "unsupported_schema_version manifest.json"),
        # The unsigned manifest is reported first (exit 5); the dangling reference too.
        (_dangling_reference, 5, "reference_mismatch records.jsonl:2"),
        (_missing_manifest, 2, "manifest.json is missing"),
    ],
    ids=lambda x: getattr(x, "__name__", None),
)
def test_bundle_exit_codes(bundle: Path, tamper: object, code: int, words: str) -> None:
    assert callable(tamper)
    tamper(bundle)
    before = {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    got, _, err = run("verify-bundle", bundle)
    assert got == code, err
    assert words in err
    assert {p: p.read_bytes() for p in bundle.rglob("*") if p.is_file()} == before


def test_bundle_bad_trusted_keys_exit_2(bundle: Path) -> None:
    code, _, err = run("verify-bundle", bundle, "--trusted-keys", asset("kla/jwks_private_d.json"))
    assert code == 2 and "private" in err


def test_bundle_json_output(bundle: Path) -> None:
    code, out, _ = run("verify-bundle", bundle, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["ok"] and doc["signatures_checked"] == 5
    assert [r["digest"] for r in doc["records"]] == json.loads(
        (bundle / "manifest.json").read_text()
    )["records"]
    assert doc["chain_head"] == hashlib.sha256(b"synthetic audit chain head").hexdigest()
