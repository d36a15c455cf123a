"""SQLAlchemy Core table definitions; the Alembic migrations create exactly these.

Migrations add, except 0015, which re-keys a table: 0001 created the three tables; 0002 added
``sessions.session_signature`` (the HMAC of the session record),
``entries.request`` (the canonical params the entry's ``request_hash`` covers)
and the unique index ``uq_entries_session_step`` (one entry per request id);
0003 the spend tables, idempotency keys and tasks; 0004 the approval desk's
columns on ``tasks``, ``approval_votes``, ``api_keys`` and ``webhook_deliveries``;
0005 ``kla_records`` (AI agent action requests and the records that follow them);
0006 the AdCP governance agent's ``adcp_plans``, ``adcp_checks``, ``adcp_outcomes`` and
``adcp_adjustments``; 0007 ``desk_sessions`` (approval-desk sessions kept server-side);
0008 spend ownership: ``budgets.principals`` (who may spend a budget) and
``reservations.principal`` / ``receipts.principal`` (who took a hold); 0009 the agent
identity registry, ``agents`` and ``agent_keys``; 0010 the transparency log:
``entries.log_index``, ``log_state``, ``log_events``, ``log_checkpoints``, ``log_cosignatures``;
0013 AdCP RFC 9421: ``adcp_signing_keys`` (agents' JWKs) and ``adcp_signature_nonces``
(the durable replay cache).
0014 policy change: ``policy_bundles`` (the source of every bundle loaded or activated, by
digest) and ``policy_active`` (the bundle to serve).
0015 ``kla_records`` keyed by ``(principal, record_id)`` (each principal's action request
ids are its own).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)

#: The newest migration's revision: the schema these tables are. Adding a migration means
#: raising it (tests/store/test_migrations.py holds it to Alembic's own head), and a
#: database at it is opened without importing Alembic (``store/sql.py`` ``upgrade``).
SCHEMA_REVISION = "0015"

metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("session_id", String(64), primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("key_id", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("negotiated", Text, nullable=False),
    Column("closed", Boolean, nullable=False, default=False),
    Column("head_seq", Integer, nullable=False, default=-1),
    Column("head_hash", String(64), nullable=True),
    Column("head_signature", Text, nullable=True),
    Column("session_signature", Text, nullable=True),
)

replay_keys = Table(
    "replay_keys",
    metadata,
    Column("session_id", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("value", String(128), nullable=False),
    Column("seen_at", String(40), nullable=False),
    PrimaryKeyConstraint("session_id", "kind", "value", name="pk_replay_keys"),
)

entries = Table(
    "entries",
    metadata,
    Column("session_id", String(64), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("entry_hash", String(64), nullable=False),
    Column("step_id", Text, nullable=False),
    Column("step_type", Text, nullable=False),
    Column("entry", Text, nullable=False),
    Column("response", Text, nullable=True),
    Column("created_at", String(40), nullable=False),
    Column("request", Text, nullable=True),
    #: The entry's leaf index in the transparency log (migration 0010): global, gapless.
    Column("log_index", BigInteger, nullable=True),
    PrimaryKeyConstraint("session_id", "seq", name="pk_entries"),
)
Index("uq_entries_log_index", entries.c.log_index, unique=True)

#: One chained entry per request id and session: a replayed request cannot be chained
#: twice even if its replay keys were deleted. Entries without a step id ("") are exempt.
STEP_INDEX_WHERE = "step_id <> ''"
Index(
    "uq_entries_session_step",
    entries.c.session_id,
    entries.c.step_id,
    unique=True,
    sqlite_where=text(STEP_INDEX_WHERE),
    postgresql_where=text(STEP_INDEX_WHERE),
)

# -- spend (migration 0003) ----------------------------------------------------------

budgets = Table(
    "budgets",
    metadata,
    Column("budget_id", String(64), primary_key=True),
    Column("kind", String(8), nullable=False),
    Column("parent_id", String(64), nullable=True),
    Column("currency", String(3), nullable=False),
    Column("cap", Text, nullable=False),
    Column("period", String(8), nullable=False),
    Column("name", Text, nullable=False),
    Column("updated_at", String(40), nullable=False),
    # JSON list of principals and group:<name> entries that may spend it (0008).
    Column("principals", Text, nullable=False, server_default=text("'[]'")),
)

budget_usage = Table(
    "budget_usage",
    metadata,
    Column("budget_id", String(64), nullable=False),
    Column("bucket", String(16), nullable=False),
    Column("reserved", Text, nullable=False),
    Column("settled", Text, nullable=False),
    PrimaryKeyConstraint("budget_id", "bucket", name="pk_budget_usage"),
)

reservations = Table(
    "reservations",
    metadata,
    Column("reservation_id", String(64), primary_key=True),
    Column("budget_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("expires_at", String(40), nullable=False),
    Column("record", Text, nullable=False),
    # The API key principal that took the hold; NULL: owned by nobody (0008).
    Column("principal", String(200), nullable=True),
)
Index("ix_reservations_held_expiry", reservations.c.status, reservations.c.expires_at)

receipts = Table(
    "receipts",
    metadata,
    Column("receipt_id", String(64), primary_key=True),
    Column("reservation_id", String(64), nullable=False),
    Column("record", Text, nullable=False),
    Column("principal", String(200), nullable=True),  # its reservation's (0008)
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("scope", String(200), nullable=False),
    Column("idem_key", String(255), nullable=False),
    Column("request_hash", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("response", Text, nullable=True),
    Column("created_at", String(40), nullable=False),
    Column("expires_at", String(40), nullable=False),
    PrimaryKeyConstraint("scope", "idem_key", name="pk_idempotency_keys"),
)

tasks = Table(
    "tasks",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("record", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("updated_at", String(40), nullable=False),
    # 0004: the approval desk's queried fields (NULL for tasks that are not approvals)
    Column("state", String(16), nullable=True),
    Column("action_hash", String(64), nullable=True),
    Column("session_id", String(255), nullable=True),
    Column("expires_at", String(40), nullable=True),
    Column("approver_group", String(128), nullable=True),
)
Index("ix_tasks_session_action", tasks.c.session_id, tasks.c.action_hash)
Index("ix_tasks_state_expiry", tasks.c.state, tasks.c.expires_at)

approval_votes = Table(
    "approval_votes",
    metadata,
    Column("task_id", String(64), nullable=False),
    Column("principal", String(200), nullable=False),
    Column("key_id", String(64), nullable=False),
    Column("decision", String(8), nullable=False),
    Column("reason", Text, nullable=False),
    Column("at", String(40), nullable=False),
    # One vote per approver per task: N-of-M counts distinct principals by construction.
    PrimaryKeyConstraint("task_id", "principal", name="pk_approval_votes"),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", String(64), primary_key=True),
    Column("principal", String(200), nullable=False),
    Column("role", String(16), nullable=False),
    Column("groups", Text, nullable=False),
    Column("secret_hash", String(128), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("revoked_at", String(40), nullable=True),
)
# Authentication looks a key up by its keyed hash.
Index("uq_api_keys_secret_hash", api_keys.c.secret_hash, unique=True)

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("delivery_id", String(64), primary_key=True),
    Column("webhook_id", String(64), nullable=False),
    Column("task_id", String(64), nullable=False),
    Column("event", String(32), nullable=False),
    Column("url", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", String(40), nullable=False),
    Column("lease_until", String(40), nullable=True),
    Column("last_error", Text, nullable=True),
    Column("response_status", Integer, nullable=True),
    Column("created_at", String(40), nullable=False),
    Column("delivered_at", String(40), nullable=True),
)
Index(
    "ix_webhook_deliveries_due", webhook_deliveries.c.status, webhook_deliveries.c.next_attempt_at
)

#: Random secrets Warden generates once and every replica shares (the desk's cookie key).
server_secrets = Table(
    "server_secrets",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)

#: Logged-in approval-desk sessions (migration 0007): the SHA-256 of the random session
#: id in the cookie, the key it belongs to, and when it ends (RFC 3339 UTC).
desk_sessions = Table(
    "desk_sessions",
    metadata,
    Column("session_hash", String(64), primary_key=True),
    Column("key_id", String(64), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("expires_at", String(40), nullable=False),
)
Index("ix_desk_sessions_key", desk_sessions.c.key_id)
Index("ix_desk_sessions_expiry", desk_sessions.c.expires_at)

#: Registered agents (migration 0009): the owner principal (the maker in maker-checker),
#: groups and budgets as JSON lists, RFC 3339 UTC times; ``revoked_at`` NULL while active.
agents = Table(
    "agents",
    metadata,
    Column("agent_id", String(128), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("groups", Text, nullable=False),
    Column("budgets", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("revoked_at", String(40), nullable=True),
)

#: Each agent's ACS key ids (migration 0009); the key material is derived, never stored.
agent_keys = Table(
    "agent_keys",
    metadata,
    Column("key_id", String(64), primary_key=True),
    Column("agent_id", String(128), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("revoked_at", String(40), nullable=True),
    # An asymmetric (ACS-Crypto) key: its algorithm and base64 SPKI DER (migration 0012);
    # both NULL for an HMAC key, whose material is derived.
    Column("algorithm", String(32), nullable=True),
    Column("public_key", Text, nullable=True),
)
Index("ix_agent_keys_agent", agent_keys.c.agent_id)

#: Agents' public keys for AdCP RFC 9421 signed requests (migration 0013): the JWK as
#: registered (``kid`` is its ``keyid``), ``revoked_at`` NULL while usable.
adcp_signing_keys = Table(
    "adcp_signing_keys",
    metadata,
    Column("kid", String(200), primary_key=True),
    Column("agent_id", String(128), nullable=False),
    Column("jwk", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("revoked_at", String(40), nullable=True),
)
Index("ix_adcp_signing_keys_agent", adcp_signing_keys.c.agent_id)

#: The RFC 9421 replay cache (migration 0013): each accepted ``(keyid, nonce)`` until
#: ``expires_at`` (Unix s: the signature's ``expires`` + 60 s skew), shared by replicas.
adcp_signature_nonces = Table(
    "adcp_signature_nonces",
    metadata,
    Column("keyid", String(200), nullable=False),
    Column("nonce", String(200), nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    PrimaryKeyConstraint("keyid", "nonce", name="pk_adcp_signature_nonces"),
)
Index(
    "ix_adcp_signature_nonces_expiry",
    adcp_signature_nonces.c.keyid,
    adcp_signature_nonces.c.expires_at,
)

# -- AI agent action requests (migration 0005) ---------------------------------------

#: Every KLA record Warden received or wrote: action requests (as received, in their
#: RFC 8785 canonical form), policy decisions, approval events and audit events.
#: ``principal`` is the submitting API key's principal (an agent reads only its own);
#: ``status`` is ``processed`` or ``held_for_review`` (an unsupported schema_version).
#: Keyed per principal (migration 0015): an action request's ``record_id`` is its
#: caller-chosen ``action_request_id``, which is unique within its principal only.
kla_records = Table(
    "kla_records",
    metadata,
    Column("record_id", String(256), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("action_request_id", String(256), nullable=True),
    Column("execution_id", String(256), nullable=True),
    Column("principal", String(200), nullable=False),
    Column("digest", String(71), nullable=False),
    Column("record", Text, nullable=False),
    Column("signature", Text, nullable=True),
    Column("kid", String(256), nullable=True),
    Column("status", String(16), nullable=False),
    Column("created_at", String(40), nullable=False),
    # Signatures beside the Ed25519 one, JSON [{alg, kid, signature}] (migration 0012).
    Column("signatures", Text, nullable=True),
    PrimaryKeyConstraint("principal", "record_id", name="pk_kla_records"),
)
Index("ix_kla_records_execution", kla_records.c.execution_id)
Index("ix_kla_records_request", kla_records.c.action_request_id)

# -- AdCP governance agent (migration 0006) -----------------------------------------

#: Campaign plans synced by a caller (``sync_plans``); one row per principal and plan id,
#: so another caller's plan reads as absent. ``budget_id`` is the plan's budget in the
#: spend ledger; ``record`` the plan as synced (JSON).
adcp_plans = Table(
    "adcp_plans",
    metadata,
    Column("principal", String(200), nullable=False),
    Column("plan_id", String(255), nullable=False),
    Column("version", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("budget_id", String(64), nullable=False),
    Column("plan_hash", String(64), nullable=False),
    Column("record", Text, nullable=False),
    Column("updated_at", String(40), nullable=False),
    PrimaryKeyConstraint("principal", "plan_id", name="pk_adcp_plans"),
)

#: Every check_governance verdict (``verdict`` NULL while a human reviews it).
adcp_checks = Table(
    "adcp_checks",
    metadata,
    Column("check_id", String(64), primary_key=True),
    Column("principal", String(200), nullable=False),
    Column("plan_id", String(255), nullable=False),
    Column("check_type", String(16), nullable=False),
    Column("verdict", String(16), nullable=True),
    Column("reservation_id", String(64), nullable=True),
    Column("task_id", String(64), nullable=True),
    Column("consultation_context", String(255), nullable=True),
    Column("jti", String(64), nullable=True),
    Column("record", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)
Index(
    "ix_adcp_checks_plan", adcp_checks.c.principal, adcp_checks.c.plan_id, adcp_checks.c.created_at
)
Index("ix_adcp_checks_task", adcp_checks.c.task_id)
Index("uq_adcp_checks_jti", adcp_checks.c.jti, unique=True)
Index("uq_adcp_checks_consultation", adcp_checks.c.consultation_context, unique=True)

#: report_plan_outcome records; ``settles`` (the check id of a terminal outcome) is
#: unique: one terminal settlement per governed action.
adcp_outcomes = Table(
    "adcp_outcomes",
    metadata,
    Column("outcome_id", String(64), primary_key=True),
    Column("principal", String(200), nullable=False),
    Column("plan_id", String(255), nullable=False),
    Column("check_id", String(64), nullable=True),
    Column("outcome", String(16), nullable=False),
    Column("settles", String(64), nullable=True),
    Column("record", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)
Index(
    "ix_adcp_outcomes_plan",
    adcp_outcomes.c.principal,
    adcp_outcomes.c.plan_id,
    adcp_outcomes.c.created_at,
)
Index("uq_adcp_outcomes_settles", adcp_outcomes.c.settles, unique=True)

#: report_plan_adjustment records (``state`` reported → verified | disputed).
adcp_adjustments = Table(
    "adcp_adjustments",
    metadata,
    Column("adjustment_id", String(64), primary_key=True),
    Column("principal", String(200), nullable=False),
    Column("plan_id", String(255), nullable=False),
    Column("outcome_id", String(64), nullable=False),
    Column("state", String(16), nullable=False),
    Column("record", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)
Index(
    "ix_adcp_adjustments_plan",
    adcp_adjustments.c.principal,
    adcp_adjustments.c.plan_id,
    adcp_adjustments.c.created_at,
)

# -- transparency log (migration 0010) -------------------------------------------------

#: One row (id 1): the leaf index the next appended entry gets.
log_state = Table(
    "log_state",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("next_index", BigInteger, nullable=False),
)

#: Leaves that are no chain entry (server starts, bundle loads, API key changes).
log_events = Table(
    "log_events",
    metadata,
    Column("log_index", BigInteger, primary_key=True),
    Column("kind", String(64), nullable=False),
    Column("event", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)

#: Signed checkpoints (C2SP tlog-checkpoint notes), one per tree size.
log_checkpoints = Table(
    "log_checkpoints",
    metadata,
    Column("tree_size", BigInteger, primary_key=True),
    Column("root_hash", String(64), nullable=False),
    Column("note", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)

#: Witnesses' cosignature lines (C2SP tlog-cosignature v1) on a checkpoint.
log_cosignatures = Table(
    "log_cosignatures",
    metadata,
    Column("tree_size", BigInteger, nullable=False),
    Column("witness", String(255), nullable=False),
    Column("key_id", String(8), nullable=False),
    Column("line", Text, nullable=False),
    Column("timestamp", BigInteger, nullable=False),
    Column("received_at", String(40), nullable=False),
    PrimaryKeyConstraint("tree_size", "witness", "key_id", name="pk_log_cosignatures"),
)

# -- policy change (migration 0014) ------------------------------------------------------

#: The source of every bundle a replica loaded or `warden policy activate` promoted, by
#: content digest (what `warden whatif` re-runs a recorded decision's bundle from).
policy_bundles = Table(
    "policy_bundles",
    metadata,
    Column("digest", String(80), primary_key=True),
    Column("bundle_id", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)

#: One row (id 1): the bundle every replica serves once `warden policy activate` ran;
#: ``generation`` counts activations.
policy_active = Table(
    "policy_active",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("digest", String(80), nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("activated_at", String(40), nullable=False),
    Column("activated_by", Text, nullable=False),
)
