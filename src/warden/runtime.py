"""Wires the pieces together from :class:`Settings`: store, keys, bundle, Guardian, wires.

Start-up validates everything at once and refuses to start on any problem
(ConfigError): a bad bundle, an unreadable key or token file, a bad budgets file,
a bad database URL. Files are checked before the database is opened.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warden import __version__
from warden.adcp.governance_token import GOVERNANCE_KEY_FILENAME, load_governance_signer
from warden.adcp.request_signing import RequestSigning
from warden.adcp.webhook_signing import WebhookSigner, load_webhook_signer
from warden.approvals.desk import ApprovalDesk
from warden.approvals.notifier import DeliveryWorker, Notifier
from warden.approvals.tasks import TaskKind
from warden.approvals.webhooks import load_webhooks
from warden.core.guardian import Guardian
from warden.core.tracing import Exporting, check_exporting, start_exporting
from warden.core.types import BundleRef
from warden.crypto.asymmetric import VERIFIED_ALGORITHMS, load_or_create_mldsa_key
from warden.crypto.ed25519_keys import load_or_create_signing_key
from warden.crypto.hmac_keys import SessionKeys, ikm_fingerprint
from warden.crypto.keystore import load_or_create_api_token, load_or_create_ikm
from warden.data_dir import check_data_dir
from warden.errors import ConfigError, StoreUnavailable
from warden.gates.approval import ApprovalGate
from warden.gates.spend import SpendGate
from warden.identity.agents import AgentRegistry
from warden.identity.api_keys import ApiKeys, Role, api_key_pepper
from warden.kla.evidence import Signer
from warden.kla.keys import KeyRegistry
from warden.ledger.ledger import Ledger
from warden.ledger.system_events import record_start
from warden.policy.activation import BundleFollower, read_bundle, remember, stored_bundle
from warden.policy.activation import active_row as _active_row
from warden.policy.bundle import Bundle, load_bundle
from warden.policy.engine import PolicyEngine
from warden.settings import Settings
from warden.spend.asks import budget_increase_effect
from warden.spend.audit import SpendAuditor
from warden.spend.config import apply_budgets, check_budgets, load_budgets
from warden.spend.engine import SpendEngine
from warden.store.idempotency import Idempotency
from warden.store.secrets_sql import bind_key_fingerprint
from warden.store.sql import SqlStore, open_store
from warden.tlog.keys import load_checkpoint_signer
from warden.tlog.note import NoteError, load_witness_keys
from warden.tlog.service import CheckpointPolicy, CheckpointWorker, LogForked, TransparencyLog
from warden.whatif.shadow import ShadowWorker
from warden.wire.acs.callers import CallerKeys
from warden.wire.acs.handshake import HandshakeConfig
from warden.wire.acs.service import AcsService
from warden.wire.adcp import AdcpService, AdcpState
from warden.wire.kla.service import KlaService

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """A started Warden: what the server, the CLI and the benchmarks share."""

    settings: Settings
    store: SqlStore
    bundle: Bundle
    guardian: Guardian
    keys: SessionKeys
    acs: AcsService
    spend: SpendEngine
    ikm_created: bool
    desk: ApprovalDesk
    api_keys: ApiKeys
    expirer: HoldExpirer | None = None
    #: Sends the webhook outbox (None without a webhooks file).
    notifier: DeliveryWorker | None = None
    #: The bearer token of the spend wire (``<data-dir>/api.token``).
    api_token: str = ""
    api_token_created: bool = False
    #: The action request wire (``/v1/action-requests``), signing with Warden's Ed25519 key.
    kla: KlaService | None = None
    #: The AdCP governance agent (``/adcp/<task>``, ``/mcp``), its tokens signed with the
    #: governance key (``<data-dir>/governance-signing.key``).
    adcp: AdcpService | None = None
    #: AdCP RFC 9421 signed requests on the AdCP wire (warden.adcp.request_signing).
    adcp_signing: RequestSigning | None = None
    #: Signs RFC 9421 webhooks with ``<data-dir>/request-signing.key`` (published in the
    #: AdCP JWKS).
    webhook_signer: WebhookSigner | None = None
    #: The agent identity registry (``/v1/agents``, ``warden agents``).
    agents: AgentRegistry | None = None
    #: The key file of the demo agent registered on this data directory's first start.
    demo_agent_key: Path | None = None
    #: Its ``GET /metrics`` instruments and registry (warden.server.metrics.WardenMetrics),
    #: made by the first ``create_app`` for this runtime.
    metrics: Any = None
    #: The transparency log (``/v1/log/*``) and the thread that signs its checkpoints.
    tlog: TransparencyLog | None = None
    tlog_worker: CheckpointWorker | None = None
    #: The OTLP span exporter (warden.core.tracing.Exporting) when ``otlp_endpoint`` is
    #: set; its tracer is ``guardian.observers.tracer``.
    tracing: Exporting | None = None
    #: Polls the database for the bundle `warden policy activate` promoted (issue 19).
    follower: BundleFollower | None = None
    #: Evaluates ``shadow_policy`` beside the active bundle (None without it).
    shadow: ShadowWorker | None = None

    @classmethod
    def start(cls, settings: Settings) -> Runtime:
        # Whatever set it (option, WARDEN_DATA_DIR, config file): a file or a path that
        # cannot be created is one ConfigError line, not an OSError traceback later.
        check_data_dir(settings.data_dir)
        bundle, bundle_source = read_bundle(settings.resolved_policy())
        file_bundle = bundle
        shadow_bundle = load_bundle(settings.shadow_policy) if settings.shadow_policy else None
        # Every input file is read and checked before anything is written: a refused start
        # leaves the data directory as it found it, so the first start that succeeds is
        # still the one that registers the quick start's demo agent (decision 990).
        witnesses = _witness_keys(settings)
        kla_keys = KeyRegistry.load(settings.kla_keys) if settings.kla_keys is not None else None
        budgets = load_budgets(settings.budgets) if settings.budgets is not None else None
        url = settings.resolved_database_url()
        sqlite_file = Path(url[len("sqlite:///") :]) if url.startswith("sqlite:///") else None
        if budgets is not None and sqlite_file is not None and not sqlite_file.exists():
            check_budgets(budgets, {})  # no database yet: parents come from the file
        hooks = load_webhooks(settings.webhooks) if settings.webhooks is not None else None
        if settings.otlp_endpoint is not None:
            check_exporting()
        # A key that cannot be created (a folder in its place, a read-only mount), a
        # database that cannot be opened or is bound to another IKM fail the start; the
        # keys this start made are then removed, so the next start is again a first start
        # (its demo agent, decision 990) and nothing half-made stays (decision 351).
        made: list[Path] = []
        later: list[Path] = []
        try:
            ikm, created = load_or_create_ikm(settings.resolved_key_file())
            if created:
                made.append(settings.resolved_key_file())
                log.warning(
                    "generated a new HMAC master secret at %s (mode 0600)",
                    settings.resolved_key_file(),
                )
            token_file = settings.resolved_api_token_file()
            api_token, token_created = load_or_create_api_token(token_file)
            if token_created:
                made.append(token_file)
                log.warning("generated the bootstrap admin API token at %s (mode 0600)", token_file)
            signing_file = settings.resolved_signing_key_file()
            signing_key, signing_kid, signing_created = load_or_create_signing_key(signing_file)
            if signing_created:
                made.append(signing_file)
                log.warning(
                    "generated Warden's Ed25519 signing key %s at %s (mode 0600)",
                    signing_kid,
                    signing_file,
                )
            mldsa_file = settings.resolved_mldsa_key_file()
            mldsa_signer, mldsa_created = load_or_create_mldsa_key(mldsa_file)
            if mldsa_created:
                made.append(mldsa_file)
                log.warning(
                    "generated Warden's ML-DSA-65 signing key %s at %s (mode 0600)",
                    mldsa_signer.kid,
                    mldsa_file,
                )
            # These loaders do not say whether they created their file: absent before
            # and present after is this start's.
            later = _absent(
                settings.resolved_checkpoint_key_file(),
                settings.data_dir / GOVERNANCE_KEY_FILENAME,
                settings.resolved_webhook_signing_key_file(),
            )
            checkpoint_signer = load_checkpoint_signer(
                settings.resolved_checkpoint_key_file(), settings.log_origin
            )
            made.extend(_present(later))
            signer = load_governance_signer(settings.data_dir, settings.resolved_public_url())
            made.extend(_present(later))
            webhook_signer = load_webhook_signer(
                settings.data_dir, settings.resolved_webhook_signing_key_file()
            )
            made.extend(_present(later))
        except BaseException:
            _remove_files([*made, *_present(later)])
            raise
        try:
            store = open_store(
                settings.resolved_database_url(),
                sqlite_sync=settings.sqlite_sync,
                pool_size=settings.database_pool_size,
                lock_timeout_ms=settings.database_lock_timeout_ms,
            )
        except BaseException:
            _remove_files(made)  # not a database, unreachable: the new keys bind nothing
            raise
        try:
            bind_key_fingerprint(store, ikm_fingerprint(ikm))
        except BaseException:
            store.close()
            _remove_files(made)  # a database bound to another IKM: a new one is no use
            raise
        try:
            # A promoted bundle outlives restarts: serve it, not the --policy file.
            bundle = _active_bundle(store, bundle)
        except BaseException:
            store.close()
            raise
        keys = SessionKeys(ikm)
        guardian = Guardian(PolicyEngine(bundle))
        ledger = Ledger(store, keys, settings.key_id)
        spend = SpendEngine(store, SpendAuditor(ledger))
        desk = ApprovalDesk(
            store.transaction,
            ledger,
            desk_url=settings.resolved_public_url(),
            notifier=Notifier(hooks) if hooks is not None else None,
            reading=store.reading,
            fold_filing=store.row_locks,
        )
        desk.effects[TaskKind.BUDGET_INCREASE] = budget_increase_effect(spend)
        record_signer = Signer(
            signing_key,
            signing_kid,
            mldsa_signer,
            pq_records="ml-dsa-65" in settings.evidence_signing_keys,
            ed25519_records="ed25519" in settings.evidence_signing_keys,
        )
        kla = KlaService(store, guardian, desk, ledger, record_signer, kla_keys)
        desk.listeners[TaskKind.ACTION_REQUEST] = kla.on_desk_transition
        adcp = AdcpService(
            AdcpState(
                store,
                spend,
                guardian,
                desk,
                ledger,
                signer,
                replay_ttl_seconds=settings.idempotency_ttl_seconds,
            ),
            Idempotency(settings.idempotency_ttl_seconds),
            test_controller=settings.adcp_test_controller,
        )
        adcp_signing = RequestSigning(
            store,
            mode=settings.adcp_request_signing,
            profile=settings.adcp_signing_profile,
            content_digest=settings.adcp_signing_content_digest,
            replay_cap=settings.adcp_signing_replay_cap,
        )
        adcp.state.request_signing = adcp_signing.capability(adcp.tasks)
        desk.effects[TaskKind.ADCP_CHECK] = adcp.checks.on_approved
        desk.listeners[TaskKind.ADCP_CHECK] = adcp.checks.on_transition
        api_keys = ApiKeys(store, api_key_pepper(ikm))
        agents = AgentRegistry(store, ikm, ledger)
        try:
            demo_key = _first_agents(agents, settings, first_start=created)
        except BaseException:
            store.close()
            raise
        try:
            # The bootstrap token is the first administrator's key.
            api_keys.register(api_token, "admin", Role.ADMIN)
        except BaseException:
            store.close()
            raise
        if budgets is not None:
            try:
                changed = apply_budgets(spend, budgets)
            except BaseException:
                store.close()
                raise
            log.info(
                "budgets file %s: %d budgets, %d defined or changed",
                settings.budgets,
                len(budgets),
                len(changed),
            )
        gate = SpendGate.for_bundle(spend, bundle, store.step_entry)
        if gate is not None:
            known = {b.id for b in store.budgets()}
            for charge in gate.charges:
                if charge.budget is not None and charge.budget not in known:
                    log.warning(
                        "bundle charge %s charges budget %s, which is not defined: its calls "
                        "are denied (unknown_budget) until it is",
                        charge.id,
                        charge.budget,
                    )
        acs = AcsService(
            guardian,
            store,
            keys,
            key_id=settings.key_id,
            handshake=HandshakeConfig(
                skew_window_ms=settings.skew_window_ms,
                policy_requires_provenance=settings.policy_requires_provenance,
                crypto_algorithms=VERIFIED_ALGORITHMS,
            ),
            max_body_bytes=settings.max_body_bytes,
            provenance_cache_bytes=settings.provenance_cache_bytes,
            spend_gate=gate,
            approval_gate=ApprovalGate(desk, guardian),
            callers=CallerKeys(agents, keys, unsafe_shared_ikm=settings.unsafe_shared_ikm),
            response_signer=mldsa_signer,
        )
        if settings.unsafe_shared_ikm:
            log.warning(
                "--unsafe-shared-ikm: ACS requests signed with the master IKM are accepted; "
                "no identity is verified for them and every decision they get is marked "
                "unsafe_shared_ikm. Register agents (`warden agents add`) and drop the flag."
            )
        try:
            record_start(store, bundle.ref, replica=settings.replica_id or _replica())
            # Kept by digest so `warden whatif` can re-run the bundle a decision names.
            remember(store, file_bundle, bundle_source)
        except BaseException:
            store.close()
            raise
        tlog = TransparencyLog(
            store.engine,
            checkpoint_signer,
            witnesses=witnesses,
            quorum=settings.log_witness_quorum,
            policy=CheckpointPolicy(
                settings.log_checkpoint_interval_s, settings.log_checkpoint_entries
            ),
            pq_signer=mldsa_signer.key if "ml-dsa-65" in settings.evidence_signing_keys else None,
            ed25519="ed25519" in settings.evidence_signing_keys,
        )
        try:
            # The first checkpoint is signed before serving; the worker then signs only
            # when the log grows. A database whose leaves contradict its newest checkpoint
            # gets no signature (decision 366) but is still served: decisions must go on
            # being audited, and `warden verify` names what was changed.
            tlog.checkpoint()
        except LogForked as exc:
            log.critical("transparency log: refusing to sign a checkpoint: %s", exc)
        except BaseException:
            store.close()
            raise
        try:
            # Last of the steps that may refuse the start: a refused start leaves no
            # exporter thread behind.
            tracing = _tracing(settings, bundle.ref)
        except BaseException:
            store.close()
            raise
        if tracing is not None:
            guardian.observers.tracer = tracing.tracer
        interval = settings.spend_expiry_interval_s
        expirer = HoldExpirer(spend, interval, desk) if interval > 0 else None
        worker = None
        if hooks is not None and hooks.webhooks:
            worker = DeliveryWorker(store, hooks, signer=webhook_signer)
            worker.start()
            log.info("webhooks file %s: %d webhook(s)", settings.webhooks, len(hooks.webhooks))
        rt = cls(
            settings,
            store,
            bundle,
            guardian,
            keys,
            acs,
            spend,
            created,
            desk,
            api_keys,
            expirer,
            worker,
            api_token=api_token,
            api_token_created=token_created,
            kla=kla,
            adcp=adcp,
            adcp_signing=adcp_signing,
            webhook_signer=webhook_signer,
            agents=agents,
            demo_agent_key=demo_key,
            tlog=tlog,
            tlog_worker=CheckpointWorker(tlog, last_write=lambda: store.last_write_at),
            tracing=tracing,
        )
        replica = settings.replica_id or _replica()
        rt.follower = BundleFollower(rt, settings.policy_poll_interval_s, replica)
        if shadow_bundle is not None:
            rt.shadow = ShadowWorker(store, shadow_bundle, lambda: rt.guardian, replica=replica)
            guardian.observers.shadow = rt.shadow
            log.info(
                "shadow policy %s@%s (%s): evaluated beside the active bundle, never enforced",
                shadow_bundle.ref.id,
                shadow_bundle.ref.version,
                shadow_bundle.ref.digest,
            )
        if settings.gc_freeze:
            # The start-up heap lives as long as the process: a full collection walking it
            # took ~50 ms and left the next decision ~4x slower on cold caches (decision 330).
            gc.freeze()
        return rt

    def close(self) -> None:
        if self.follower is not None:
            self.follower.stop()
        if self.shadow is not None:
            self.guardian.observers.shadow = None
            self.shadow.stop()
        if self.tlog_worker is not None:
            self.tlog_worker.stop()  # signs the shutdown checkpoint
        if self.expirer is not None:
            self.expirer.stop()
        if self.notifier is not None:
            self.notifier.stop()
        if self.tracing is not None:
            self.tracing.shutdown()
        self.store.close()


def _active_bundle(store: SqlStore, bundle: Bundle) -> Bundle:
    """The bundle `warden policy activate` promoted, if any and not ``bundle``."""
    row = _active_row(store)
    if row is None or row.digest == bundle.ref.digest:
        return bundle
    active = stored_bundle(store, row.digest)
    log.warning(
        "serving the activated bundle %s@%s (%s, generation %d), not the policy file's %s",
        active.ref.id,
        active.ref.version,
        active.ref.digest,
        row.generation,
        bundle.ref.digest,
    )
    return active


def _tracing(settings: Settings, bundle: BundleRef) -> Exporting | None:
    """The span exporter of ``otlp_endpoint`` (None when unset: no tracer, no cost)."""
    if settings.otlp_endpoint is None:
        return None
    exporting = start_exporting(
        settings.otlp_endpoint,
        bundle=bundle,
        version=__version__,
        instance=settings.replica_id or f"{socket.gethostname()}:{os.getpid()}",
        sample_ratio=settings.trace_sample_ratio,
    )
    log.info("exporting decision spans to %s/v1/traces", settings.otlp_endpoint.rstrip("/"))
    return exporting


DEMO_AGENT = "demo-agent"
DEMO_OWNER = "demo-owner"


def _first_agents(agents: AgentRegistry, settings: Settings, *, first_start: bool) -> Path | None:
    """On a data directory's first start (the master IKM was just created), register the
    quick start's ``demo-agent`` (owner ``demo-owner``) and write its key to
    ``<data-dir>/agents/demo-agent.key`` (0600); return that path. On any other start with
    no active agent (e.g. the first start after upgrading), log how to register one."""
    if any(a.active for a in agents.list()):
        return None
    if first_start and agents.get(DEMO_AGENT) is None:
        path = settings.data_dir / "agents" / f"{DEMO_AGENT}.key"
        if not path.exists():
            _, credential = agents.add(DEMO_AGENT, DEMO_OWNER, by="quick-start")
            credential.write(path)
            log.warning(
                "registered the demo agent %s (owner %s) for the quick start; its ACS key "
                "is %s (mode 0600). Register your own agents with `warden agents add`.",
                DEMO_AGENT,
                DEMO_OWNER,
                path,
            )
            return path
    log.warning(
        "no agent is registered: ACS requests are refused unless signed with a registered "
        "agent's key. Register each agent with `warden agents add ID --owner PRINCIPAL "
        "--key-out FILE` and give it the key file (docs/identities.md); agent API keys: "
        "`warden keys create --role agent --agent ID`."
    )
    return None


def _replica() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _witness_keys(settings: Settings) -> list[Any]:
    """The witnesses' verifier keys (setting ``log_witness_keys``); ConfigError if the
    file is unreadable or malformed, or the quorum asks for more witnesses than listed."""
    keys = []
    if settings.log_witness_keys is not None:
        try:
            keys = load_witness_keys(settings.log_witness_keys.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(
                f"cannot read log_witness_keys {settings.log_witness_keys}: {exc}"
            ) from exc
        except NoteError as exc:
            raise ConfigError(f"log_witness_keys {settings.log_witness_keys}: {exc}") from exc
    if settings.log_witness_quorum > len(keys):
        raise ConfigError(
            f"log_witness_quorum is {settings.log_witness_quorum} but log_witness_keys lists "
            f"{len(keys)} witness key(s)"
        )
    return keys


def _log_tick_failure(what: str, exc: Exception) -> None:
    """One warning per failed tick; the traceback only for an unexpected error (a
    locked or unreachable store is an outage /readyz reports, not a bug)."""
    if isinstance(exc, StoreUnavailable):
        log.warning("%s: %s", what, exc.diagnostics())
    else:
        log.warning(what, exc_info=exc)


class HoldExpirer:
    """A daemon thread that releases expired spend holds every ``interval`` seconds
    (:meth:`SpendEngine.expire_due`), so a hold nobody concludes does not wait for the
    next reservation to be released, and expires approval tasks whose time ran out
    (:meth:`ApprovalDesk.expire_due`, which also notifies). Errors are logged and
    retried next tick."""

    def __init__(
        self, engine: SpendEngine, interval: float, desk: ApprovalDesk | None = None
    ) -> None:
        self._engine = engine
        self._desk = desk
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="warden-hold-expiry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                released = self._engine.expire_due()
            except Exception as exc:  # noqa: BLE001 - retried next tick; the server keeps serving
                _log_tick_failure("releasing expired spend holds failed", exc)
                continue
            if released:
                log.info("released %d expired spend hold(s)", released)
            if self._desk is None:
                continue
            try:
                expired = self._desk.expire_due()
            except Exception as exc:  # noqa: BLE001 - retried next tick
                _log_tick_failure("expiring approval tasks failed", exc)
                continue
            if expired:
                log.info("expired %d approval task(s)", expired)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _absent(*paths: Path) -> list[Path]:
    """Those of ``paths`` that do not exist yet."""
    return [p for p in paths if not p.exists()]


def _present(paths: list[Path]) -> list[Path]:
    """Those of ``paths`` that exist now, removed from ``paths`` (each is counted once)."""
    found = [p for p in paths if p.exists()]
    for p in found:
        paths.remove(p)
    return found


def _remove_files(paths: list[Path]) -> None:
    """Remove the regular files among ``paths`` (those a failed start created)."""
    for path in paths:
        if path.is_file() and not path.is_symlink():
            with suppress(OSError):
                path.unlink()
