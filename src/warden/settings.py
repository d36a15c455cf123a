"""Warden's settings: command-line options, ``WARDEN_*`` environment variables, defaults.

Embedded defaults: data under ``./.warden/`` (SQLite ``warden.db``, HMAC master
secret ``ikm.key``, spend API token ``api.token`` and Ed25519 signing key
``signing.key``, each generated on first start with mode 0600) and the shipped
bundle ``examples/policies/default.yaml`` (also packaged as
``warden/bundles/default.yaml`` for installs outside the repository).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

DEFAULT_DATA_DIR = Path(".warden")


def default_policy_path() -> Path:
    """``examples/policies/default.yaml`` in the working tree, else the packaged copy."""
    local = Path("examples/policies/default.yaml")
    if local.is_file():
        return local
    return Path(str(resources.files("warden.bundles").joinpath("default.yaml")))


def _has_space_or_control(url: str) -> bool:
    """Whether ``url`` holds whitespace or a control character, which ``urlsplit``
    silently drops (a newline would then reach headers and signed links)."""
    return any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url)


class Settings(BaseSettings):
    """Validated whole at start-up; every field may be set as ``WARDEN_<NAME>``."""

    # Every number of seconds or ratio here is finite: ``inf`` for an interval meant a
    # background job that never ran (decisions 1131, 319).
    model_config = SettingsConfigDict(env_prefix="WARDEN_", extra="forbid", allow_inf_nan=False)
    #: A config file's values, below the environment (``config_file.load_settings`` sets
    #: them on a subclass of its own).
    file_values: ClassVar[dict[str, Any]] = {}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """What is given, then ``WARDEN_*`` variables, then :attr:`file_values`: no
        ``.env`` file and no secrets directory, which Warden never documented. Each of those
        two sources cost a third of building a Settings while reading nothing."""
        if not cls.file_values:
            return (init_settings, env_settings)
        return (init_settings, env_settings, InitSettingsSource(settings_cls, cls.file_values))

    host: str = "127.0.0.1"
    port: int = Field(8787, ge=0, le=65535)
    data_dir: Path = DEFAULT_DATA_DIR
    database_url: str | None = None
    policy: Path | None = None
    key_file: Path | None = None
    key_id: str = "warden"
    #: Accepted clock skew of request timestamps, in milliseconds, 0 to 3600000 (one hour;
    #: decision 1150): a larger window all but turns the freshness check off.
    skew_window_ms: int = Field(300_000, ge=0, le=3_600_000)
    sqlite_sync: Literal["FULL", "NORMAL", "EXTRA"] = "FULL"
    #: PostgreSQL: connections kept for reads beside the store's one writing connection
    #: (a read on the decision path, such as a pending approval task, does not wait for a
    #: commit in flight). Ignored for SQLite.
    database_pool_size: int = Field(4, ge=1, le=64)
    #: How long a write waits for a lock another connection holds (another replica, a
    #: `warden` command, a backup) before the request fails closed: a 503 or a signed deny,
    #: in milliseconds, 1 to 600000. Unset: 10000 on SQLite (``busy_timeout``), 5000 on
    #: PostgreSQL (``lock_timeout``; an ``options=-c lock_timeout=…`` in the URL wins).
    #: ``warden serve`` and ``warden mcp-proxy`` use it; other commands wait the default.
    database_lock_timeout_ms: int | None = Field(None, ge=1, le=600_000)
    policy_requires_provenance: bool = False
    #: Largest accepted request body, in bytes, 1024 to 67108864 (64 MiB; decision 1150).
    max_body_bytes: int = Field(1 << 20, ge=1024, le=64 << 20)
    #: Move every object alive at the end of start-up into the garbage collector's
    #: permanent generation (``gc.freeze()``), so a later full collection does not walk the
    #: start-up heap (modules, the bundle, validators: ~130,000 objects) and does not evict
    #: from the CPU caches what the next decisions use. Process-wide: turn it off when
    #: embedding Warden in a process that manages its own collector (decision 330).
    gc_freeze: bool = True
    #: Byte budget of the per-process cache of session provenance graphs (decision 197).
    provenance_cache_bytes: int = Field(256 * 1024 * 1024, ge=0)
    #: The bootstrap admin API token (0600; created on first start); default
    #: ``<data-dir>/api.token``.
    api_token_file: Path | None = None
    #: A YAML list of budgets upserted at start (see warden.spend.config).
    budgets: Path | None = None
    #: A YAML file of webhooks notified on every approval task change
    #: (see warden.approvals.webhooks).
    webhooks: Path | None = None
    #: How long a stored Idempotency-Key response is replayed (AdCP recommends 86400).
    idempotency_ttl_seconds: int = Field(86_400, ge=1, le=604_800)
    #: How often expired spend holds are released in the background (s); 0 = only when
    #: a reservation is made. A finite number: ``inf`` would never release them.
    spend_expiry_interval_s: float = Field(30.0, ge=0)

    #: Warden's Ed25519 signing key (PKCS#8 PEM, 0600; created on first start): signs the
    #: KLA records Warden writes; default ``<data-dir>/signing.key``.
    signing_key_file: Path | None = None
    #: Trusted public keys of action-request signers (a JWKS file, a PEM file or a
    #: directory of them; see warden.kla.keys). Without it a signed request is refused.
    kla_keys: Path | None = None
    #: Warden's ML-DSA-65 key (PKCS#8 PEM of its seed, 0600; created on first start):
    #: signs every response of an ACS-Crypto session, and checkpoints and KLA records
    #: when ``evidence_signing_keys`` names it; default ``<data-dir>/mldsa.key``.
    mldsa_key_file: Path | None = None
    #: Which of Warden's keys sign the transparency log's checkpoints and the KLA records
    #: it writes: ``ed25519`` (the checkpoint and signing keys), ``ml-dsa-65`` (the ML-DSA
    #: key), or both; a verifier knowing either key accepts (issue 21).
    evidence_signing_keys: tuple[Literal["ed25519", "ml-dsa-65"], ...] = Field(
        ("ed25519",), min_length=1
    )

    #: The URL approvers reach this Warden at (task links in asks and notifications);
    #: default ``http://<host>:<port>``.
    public_url: str | None = None
    #: Serve AdCP's ``comply_test_controller`` (the compliance runner's seeding hook,
    #: which overwrites the caller's plans): for compliance testing only, off by default.
    adcp_test_controller: bool = False
    #: AdCP RFC 9421 signed requests on ``/adcp/<task>`` and ``/mcp``: ``supported`` (a
    #: signed request must verify and authenticates as the key's agent; unsigned calls use
    #: an API key), ``required`` (AdCP ``required_for``: an unsigned call without a valid
    #: API key gets ``request_signature_required``), ``warn`` (AdCP ``warn_for``: a bad
    #: signature falls back to a valid API key, logged) or ``off`` (signature headers are
    #: not read, nothing is advertised).
    adcp_request_signing: Literal["off", "supported", "required", "warn"] = "supported"
    #: The request-signing profile: ``3.2`` (RFC 8941 Base64; ``content-digest`` covered
    #: whenever there is a body) or ``3.1`` (legacy Base64URL, for 3.1 signers).
    adcp_signing_profile: Literal["3.2", "3.1"] = "3.2"
    #: Under the 3.1 profile only: whether signatures must cover ``content-digest``.
    adcp_signing_content_digest: Literal["required", "either", "forbidden"] = "required"
    #: Live replay-cache entries one signing key may hold (RFC 9421 step 9a); past it
    #: its requests get ``request_signature_rate_abuse``. AdCP asks for at least 1,000,000.
    adcp_signing_replay_cap: int = Field(1_000_000, ge=1)
    #: Warden's Ed25519 key that signs RFC 9421 webhooks (PKCS#8 PEM, 0600; created on
    #: first start; published in ``/.well-known/jwks.json``); default
    #: ``<data-dir>/request-signing.key``.
    webhook_signing_key_file: Path | None = None
    #: Accept ACS requests signed with the master IKM's own session keys (the pre-issue-15
    #: shared credential): unsafe, logged at start, and every decision it signs is marked
    #: ``policy_data.unsafe_shared_ikm``. Registered agents' keys work either way.
    unsafe_shared_ikm: bool = False

    # -- the transparency log (issue 17; decisions 360-389) --------------------------------
    #: The Ed25519 key that signs the log's checkpoints (PKCS#8 PEM, 0600; created on first
    #: start; separate from the IKM and the signing key); default
    #: ``<data-dir>/checkpoint.key``.
    checkpoint_key_file: Path | None = None
    #: The checkpoints' origin line and key name (a schema-less URL naming this log);
    #: default ``warden.invalid/log/<first 16 hex of the checkpoint key id>``.
    log_origin: str | None = Field(None, min_length=1, max_length=255, pattern=r"^[^\s+]+$")
    #: A new checkpoint is signed when the log grew and this many seconds passed ...
    log_checkpoint_interval_s: float = Field(10.0, ge=0.05)
    #: ... or when it grew by this many entries (and always on shutdown).
    log_checkpoint_entries: int = Field(1000, ge=1)
    #: A file of the witnesses' verifier keys (C2SP vkeys, type 0x04), one per line;
    #: only their cosignatures are accepted.
    log_witness_keys: Path | None = None
    #: How many of those witnesses must cosign a checkpoint before it is final.
    log_witness_quorum: int = Field(0, ge=0, le=100)

    # -- operations (issue 18; decisions 231-245) ----------------------------------------
    #: Python logging level of ``warden serve`` (DEBUG, INFO, WARNING, ERROR, CRITICAL).
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    #: Who may read ``GET /metrics``: ``loopback`` serves loopback clients without a key
    #: and everyone else with an admin API key; ``key`` asks every client for the key.
    metrics_access: Literal["loopback", "key"] = "loopback"
    #: This replica's name on ``warden_replica_info``; default ``<hostname>:<pid>``.
    replica_id: str | None = Field(None, min_length=1, max_length=128)
    #: Serve HTTPS with this PEM certificate (chain) file; needs ``tls_key``.
    tls_cert: Path | None = None
    #: The PEM private key of ``tls_cert`` (keep it 0600); needs ``tls_cert``.
    tls_key: Path | None = None
    #: Export a span per decision by OTLP/HTTP to this collector base URL (spans go to
    #: ``<url>/v1/traces``; needs ``pip install 'warden[otel]'``); unset: no traces.
    otlp_endpoint: str | None = None
    #: The share of new traces kept (0..1); a caller's ``traceparent`` sampled flag
    #: is followed whatever this is.
    trace_sample_ratio: float = Field(1.0, ge=0.0, le=1.0)

    # -- policy change (issue 19; decisions 480-499) --------------------------------------
    #: A candidate bundle evaluated beside the active one on every decision, after its
    #: answer is committed and off the response path; never enforced. Each divergence is
    #: a ``policy.shadow_divergence`` log event and counted in ``/metrics``.
    shadow_policy: Path | None = None
    #: How often each replica polls the database for the bundle ``warden policy activate``
    #: promoted (s); 0 = never (the replica serves what it started with).
    policy_poll_interval_s: float = Field(2.0, ge=0)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both or neither")
        return self

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        if (
            parts.scheme not in ("http", "https")
            or not parts.netloc
            or parts.query
            or _has_space_or_control(v)
        ):
            raise ValueError("public_url must be an http(s) URL such as https://warden.example")
        return v

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        if (
            parts.scheme not in ("http", "https")
            or not parts.netloc
            or parts.query
            or _has_space_or_control(v)
        ):
            raise ValueError(
                "otlp_endpoint must be an OTLP/HTTP base URL such as http://127.0.0.1:4318"
            )
        return v

    def resolved_public_url(self) -> str:
        scheme = "https" if self.tls_cert is not None else "http"
        return (self.public_url or f"{scheme}://{self.host}:{self.port}").rstrip("/")

    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'warden.db'}"

    def resolved_policy(self) -> Path:
        return self.policy or default_policy_path()

    def resolved_key_file(self) -> Path:
        return self.key_file or self.data_dir / "ikm.key"

    def resolved_api_token_file(self) -> Path:
        return self.api_token_file or self.data_dir / "api.token"

    def resolved_signing_key_file(self) -> Path:
        return self.signing_key_file or self.data_dir / "signing.key"

    def resolved_mldsa_key_file(self) -> Path:
        return self.mldsa_key_file or self.data_dir / "mldsa.key"

    def resolved_checkpoint_key_file(self) -> Path:
        return self.checkpoint_key_file or self.data_dir / "checkpoint.key"

    def resolved_webhook_signing_key_file(self) -> Path:
        return self.webhook_signing_key_file or self.data_dir / "request-signing.key"
