"""warden.toml (issue 18 item 5): every serve option as a key, precedence CLI > env >
file > defaults, unknown keys refused by name, and the generated reference page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import DEFAULT_POLICY, ROOT, start_server
from prometheus_client.parser import text_string_to_metric_families

from warden.config_file import load_settings
from warden.errors import ConfigError
from warden.settings import Settings
from warden.settings_doc import _comments, _serve_params, generate

#: A TOML number as the error shows it once read: the value, not the text.
TOML_READ = {"1e400": "inf"}


def test_every_serve_option_is_a_settings_key() -> None:
    options = set(_serve_params()) - {"config"}
    assert options <= set(Settings.model_fields), options - set(Settings.model_fields)


def test_precedence_cli_env_file_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    cfg = tmp_path / "conf" / "warden.toml"
    cfg.parent.mkdir()
    cfg.write_text(
        'port = 9001\nkey_id = "from-file"\nreplica_id = "file-replica"\n'
        'policy = "bundles/p.yaml"\nmetrics_access = "key"\n'
    )
    s = load_settings(cfg)
    assert (s.port, s.key_id, s.replica_id, s.metrics_access) == (
        9001,
        "from-file",
        "file-replica",
        "key",
    )
    assert s.policy == cfg.parent / "bundles" / "p.yaml"  # relative to the file
    assert s.host == "127.0.0.1" and s.skew_window_ms == 300_000  # defaults
    monkeypatch.setenv("WARDEN_PORT", "9002")
    monkeypatch.setenv("WARDEN_KEY_ID", "from-env")
    s = load_settings(cfg, port=9003, key_id=None)
    assert (s.port, s.key_id, s.replica_id) == (9003, "from-env", "file-replica")
    assert isinstance(s, Settings) and type(s) is Settings


def test_unknown_key_and_bad_values_are_refused_by_name(tmp_path: Path) -> None:
    cfg = tmp_path / "warden.toml"
    cfg.write_text("port = 8787\nmetrics_acess = 'key'\n")
    with pytest.raises(ConfigError, match="unknown key 'metrics_acess'"):
        load_settings(cfg)
    cfg.write_text("port = 'eighty'\n")
    with pytest.raises(ConfigError, match="port"):
        load_settings(cfg)
    cfg.write_text("port = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(cfg)
    cfg.write_text('tls_cert = "c.pem"\n')
    with pytest.raises(ConfigError, match="tls_cert and tls_key go together"):
        load_settings(cfg)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "database_lock_timeout_ms = true",
            "database_lock_timeout_ms: Input should be a valid integer, not a TOML boolean",
        ),
        ("port = true", "port: Input should be a valid integer, not a TOML boolean"),
        (
            'database_lock_timeout_ms = "100"',
            "database_lock_timeout_ms: Input should be a valid integer, not a TOML string",
        ),
        ("port = 8787.0", "port: Input should be a valid integer, not a TOML float"),
        (
            'policy_requires_provenance = "true"',
            "policy_requires_provenance: Input should be a valid boolean, not a TOML string",
        ),
        (
            "adcp_test_controller = 1",
            "adcp_test_controller: Input should be a valid boolean, not a TOML integer",
        ),
        ("host = 1", "host: Input should be a valid string, not a TOML integer"),
        ("data_dir = false", "data_dir: Input should be a valid string, not a TOML boolean"),
        (
            'trace_sample_ratio = "0.5"',
            "trace_sample_ratio: Input should be a valid number, not a TOML string",
        ),
        (
            'evidence_signing_keys = "ed25519"',
            "evidence_signing_keys: Input should be a valid array, not a TOML string",
        ),
        (
            "key_id = 1979-05-27",
            "key_id: Input should be a valid string, not a TOML date or time",
        ),
    ],
)
def test_a_file_value_of_the_wrong_toml_type_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, message: str
) -> None:
    """The file is typed: a boolean, a string or a float is not coerced into an int
    (``true`` once became 1 ms, ``port = true`` port 1; decision 1060)."""
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    cfg = tmp_path / "w.toml"
    cfg.write_text(line + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(cfg)
    # The reason, then the file and the line that set it, as written (decision 1171).
    assert caught.value.message == f"invalid settings: {message} (config file {cfg}: {line})"


@pytest.mark.parametrize("name", ["log_checkpoint_interval_s", "policy_poll_interval_s"])
@pytest.mark.parametrize("value", ["inf", "nan", "1e400"])
def test_every_interval_is_a_finite_number_of_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """The other intervals took ``inf`` as the spend expiry's did (a job that never runs)."""
    for env in list(os.environ):
        if env.startswith("WARDEN_"):
            monkeypatch.delenv(env)
    cfg = tmp_path / "w.toml"
    cfg.write_text(f"{name} = {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(cfg)
    message = caught.value.message
    assert message.startswith(f"invalid settings: {name}: ")
    # As TOML read it: 1e400 is inf.
    assert message.endswith(f" (config file {cfg}: {name} = {TOML_READ.get(value, value)})")


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-1", "1e400"])
@pytest.mark.parametrize("source", ["file", "environment"])
def test_spend_expiry_interval_must_be_a_finite_number_of_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str, source: str
) -> None:
    """``inf`` was taken (holds then never released in the background); it is refused in
    one line, as ``nan`` and negative values are. 0 keeps its meaning (only on reservation)."""
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    cfg = tmp_path / "w.toml"
    if source == "file":
        cfg.write_text(f"spend_expiry_interval_s = {value}\n")
    else:
        cfg.write_text("")
        monkeypatch.setenv("WARDEN_SPEND_EXPIRY_INTERVAL_S", value)
    with pytest.raises(ConfigError) as caught:
        load_settings(cfg)
    message = caught.value.message
    assert message.startswith("invalid settings: spend_expiry_interval_s: ")
    # Named where it was set: with a config file given, a variable's value was once
    # reported as the file's (decision 1171).
    if source == "file":
        read = TOML_READ.get(value, value)
        assert message.endswith(f" (config file {cfg}: spend_expiry_interval_s = {read})")
    else:
        assert message.endswith(f" (environment: WARDEN_SPEND_EXPIRY_INTERVAL_S={value!r})")
    assert "\n" not in message
    monkeypatch.delenv("WARDEN_SPEND_EXPIRY_INTERVAL_S", raising=False)
    cfg.write_text("spend_expiry_interval_s = 0\n")
    assert load_settings(cfg).spend_expiry_interval_s == 0


def test_file_values_of_the_right_type_still_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strict types, not strict spelling: an integer for a float, a string for a path or a
    choice, an array for a tuple, and a lower-case log level (the model upper-cases it)."""
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    cfg = tmp_path / "w.toml"
    cfg.write_text(
        "database_lock_timeout_ms = 100\ntrace_sample_ratio = 1\nport = 0\n"
        'log_level = "debug"\nevidence_signing_keys = ["ed25519", "ml-dsa-65"]\n'
        'data_dir = "d"\nadcp_test_controller = true\nsqlite_sync = "NORMAL"\n'
    )
    s = load_settings(cfg)
    assert (s.database_lock_timeout_ms, s.trace_sample_ratio, s.port, s.log_level) == (
        100,
        1.0,
        0,
        "DEBUG",
    )
    assert s.evidence_signing_keys == ("ed25519", "ml-dsa-65") and s.data_dir == tmp_path / "d"
    assert s.adcp_test_controller is True and s.sqlite_sync == "NORMAL"
    # The environment stays text, parsed as before, and still wins over the file.
    monkeypatch.setenv("WARDEN_DATABASE_LOCK_TIMEOUT_MS", "250")
    monkeypatch.setenv("WARDEN_ADCP_TEST_CONTROLLER", "false")
    s = load_settings(cfg)
    assert (s.database_lock_timeout_ms, s.adcp_test_controller) == (250, False)


def test_the_documented_example_file_loads(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    example = page.split("```toml\n", 1)[1].split("```", 1)[0]
    cfg = tmp_path / "warden.toml"
    cfg.write_text(example)
    s = load_settings(cfg)
    assert (s.host, s.port, s.metrics_access) == ("0.0.0.0", 8443, "key")
    assert s.tls_cert == tmp_path / "tls" / "cert.pem"


def _serve_with(cfg: Path) -> subprocess.CompletedProcess[str]:
    """``warden serve --config cfg`` in cfg's folder, with no WARDEN_* variables."""
    return subprocess.run(
        [sys.executable, "-m", "warden", "serve", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cfg.parent,
        env={k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")},
    )


def test_serve_refuses_a_wrong_type_in_one_line_and_starts_nothing(tmp_path: Path) -> None:
    cfg = tmp_path / "w.toml"
    cfg.write_text("database_lock_timeout_ms = true\n")
    done = _serve_with(cfg)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "error: invalid settings: database_lock_timeout_ms: Input should be a valid integer, "
        f"not a TOML boolean (config file {cfg}: database_lock_timeout_ms = true)"
    ]
    assert not (tmp_path / ".warden").exists()  # nothing created


@pytest.mark.parametrize(
    ("line", "bound"),
    [
        ("skew_window_ms = 99999999999999999", "3600000"),  # freshness check off, in effect
        ("skew_window_ms = 3600001", "3600000"),
        ("max_body_bytes = 99999999999999999999", "67108864"),
        ("max_body_bytes = 67108865", "67108864"),
    ],
)
def test_the_skew_window_and_body_cap_have_an_upper_bound(
    tmp_path: Path, line: str, bound: str
) -> None:
    """Decision 1150: at most one hour of skew and 64 MiB of body; over it, serve says so
    in the one "invalid settings" line and starts nothing."""
    cfg = tmp_path / "w.toml"
    cfg.write_text(line + "\n")
    done = _serve_with(cfg)
    assert done.returncode == 2, done.stderr
    [message] = done.stderr.splitlines()
    name = line.split(" = ")[0]
    assert message.startswith(f"error: invalid settings: {name}: ")
    assert message.endswith(f" (config file {cfg}: {line})")
    assert bound in message
    assert not (tmp_path / ".warden").exists()  # nothing created


def test_the_upper_bounds_themselves_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for env in list(os.environ):
        if env.startswith("WARDEN_"):
            monkeypatch.delenv(env)
    cfg = tmp_path / "w.toml"
    cfg.write_text("skew_window_ms = 3600000\nmax_body_bytes = 67108864\n")
    s = load_settings(cfg)
    assert (s.skew_window_ms, s.max_body_bytes) == (3_600_000, 64 * 1024 * 1024)


def test_serve_refuses_an_unknown_key_and_starts_nothing(tmp_path: Path) -> None:
    cfg = tmp_path / "warden.toml"
    cfg.write_text("prot = 9000\n")
    done = _serve_with(cfg)
    assert done.returncode == 2
    assert "unknown key 'prot'" in done.stderr
    assert not (tmp_path / ".warden").exists()  # nothing created


def test_serve_reads_the_config_file_from_warden_config(tmp_path: Path) -> None:
    data = tmp_path / "srv"
    data.mkdir()
    cfg = data / "warden.toml"
    cfg.write_text('replica_id = "from-toml"\nmetrics_access = "loopback"\n')
    os.environ["WARDEN_CONFIG"] = str(cfg)
    try:
        srv = start_server(data, DEFAULT_POLICY)
    finally:
        del os.environ["WARDEN_CONFIG"]
    try:
        text = httpx.get(srv.url + "/metrics", timeout=30).text
        infos = [
            s.labels
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "warden_replica_info"
        ]
        assert infos and infos[0]["replica_id"] == "from-toml"
    finally:
        srv.stop()


def test_configuration_page_is_generated_from_the_model() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == generate(), "run: python -m warden.settings_doc --write docs/configuration.md"
    for name in Settings.model_fields:
        assert f"| `{name}` |" in page


def test_the_lock_wait_range_and_who_honours_it_are_written_down() -> None:
    """Decision 1062: the range the model enforces is the one `--help`, the reference page
    and the settings comment state, and docs/operations.md names the setting and says
    which commands use it."""
    meta = Settings.model_fields["database_lock_timeout_ms"].metadata
    low = next(m.ge for m in meta if getattr(m, "ge", None) is not None)
    high = next(m.le for m in meta if getattr(m, "le", None) is not None)
    stated = f"{low} to {high}"
    assert stated == "1 to 600000"
    assert stated in _serve_params()["database_lock_timeout_ms"].help
    row = next(
        line
        for line in (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `database_lock_timeout_ms` |")
    )
    assert stated in row
    assert f"in milliseconds, {stated}." in _comments()["database_lock_timeout_ms"]
    ops = " ".join((ROOT / "docs" / "operations.md").read_text(encoding="utf-8").split())
    durability = ops.split("## Durability", 1)[1].split("## ", 1)[0]
    assert "waits up to 10 s" in durability and "`database_lock_timeout_ms`" in durability
    assert "`warden mcp-proxy`, through `WARDEN_DATABASE_LOCK_TIMEOUT_MS`" in durability
    assert "`warden agents add`" in durability and "wait the default" in durability
