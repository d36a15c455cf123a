"""AdCP idempotency glue (specs/adcp-spend-kla.md §1.5) over the store's one
idempotency table (:mod:`warden.store.idempotency`, shared with the spend wire).

- **Scope** ``(authenticated agent, account, key)``: the store's scope string is
  ``adcp:`` + SHA-256 of the agent's principal and the request's account, so two agents
  (or two accounts of one agent) never see each other's keys.
- **Request hash**: SHA-256 of the RFC 8785 form of ``{task, request}`` where the
  request loses exactly the closed exclusion list — top-level ``idempotency_key``,
  ``context``, ``governance_context`` and ``push_notification_config.authentication
  .credentials``. Everything else, ``ext`` included, is hashed; a missing member and an
  explicit ``null`` differ. The task name is hashed too, so one key reused for another
  task is a conflict.
- **What is cached**: the response body without its per-response envelope members
  (``context``, ``timestamp``, ``replayed``); a replay adds them afresh, with
  ``replayed: true`` (the flag is never stored).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from warden.adcp.errors import AdcpError
from warden.crypto.canonical import canonical_bytes, sha256_hex
from warden.store.idempotency import KEY_PATTERN

EXCLUDED_TOP_LEVEL = ("idempotency_key", "context", "governance_context")
#: Per-response members a cached body does not keep.
VOLATILE = ("context", "timestamp", "replayed")
_KEY = re.compile(KEY_PATTERN)


def account_of(request: dict[str, Any]) -> str:
    """The account a request names (``account.account_id``, else its natural key), or
    ``""``: part of the idempotency scope."""
    account = request.get("account")
    if not isinstance(account, dict):
        return ""
    account_id = account.get("account_id")
    if isinstance(account_id, str):
        return "id:" + account_id
    return "key:" + canonical_bytes(account).decode("utf-8")


def scope_of(principal: str, request: dict[str, Any]) -> str:
    """The store scope of ``(agent, account)``: ``adcp:`` + 64 hex characters."""
    return "adcp:" + str(sha256_hex(canonical_bytes([principal, account_of(request)])))


def request_hash(task: str, request: dict[str, Any]) -> str:
    """Hex SHA-256 of the JCS of ``{task, request − excluded}`` (see the module doc)."""
    kept = {k: v for k, v in request.items() if k not in EXCLUDED_TOP_LEVEL}
    push = kept.get("push_notification_config")
    if isinstance(push, dict) and isinstance(push.get("authentication"), dict):
        push = copy.deepcopy(push)
        push["authentication"].pop("credentials", None)
        kept["push_notification_config"] = push
    return str(sha256_hex(canonical_bytes({"task": task, "request": kept})))


def key_of(request: dict[str, Any]) -> str | None:
    """The request's ``idempotency_key``, None when absent; ``INVALID_REQUEST`` when it is
    not 16..255 characters of ``[A-Za-z0-9_.:-]``."""
    key = request.get("idempotency_key")
    if key is None:
        return None
    if not isinstance(key, str) or not _KEY.match(key):
        raise AdcpError(
            "INVALID_REQUEST",
            "idempotency_key must be 16 to 255 characters of letters, digits and _.:-",
            field="idempotency_key",
        )
    return key


def cacheable(body: dict[str, Any]) -> str:
    """The stored form of a successful response body (JSON text)."""
    kept = {k: v for k, v in body.items() if k not in VOLATILE}
    return json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
