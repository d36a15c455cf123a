"""One decision's page on the desk's operator view: the request as received, the
verdict with its rules and their reasoning, a provenance summary, and the entry's
place in its audit chain with the result of verifying its link
(:func:`warden.ledger.verify.verify_link`, the same checks ``warden verify`` makes).

**Secrets.** The stored request is the canonical params exactly as received, so it
still holds any value a ``modify`` verdict redacted before the tool saw it. The page
shows it with each redaction of the verdict (the signed response's
``modifications.redactions``, JSON pointers into the payload) applied, and says so;
the verification hashes the stored text itself.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from jsonpointer import JsonPointer, JsonPointerException

from warden.approvals.display import Layout
from warden.approvals.redaction import REDACTED
from warden.errors import IntegrityError
from warden.ledger.verify import verify_link
from warden.policy.bundle import Bundle
from warden.server.ops_view import entry_href, parse_json, summarize
from warden.store.activity_sql import EntryChain, StoredEntry


def _pretty(value: Any) -> Layout:
    """Indented JSON whose line breaks are layout (see :class:`Layout`)."""
    return Layout(json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True))


def _result(response: Any) -> dict[str, Any]:
    if not isinstance(response, dict):
        return {}
    for key in ("result", "error"):
        inner = response.get(key)
        if isinstance(inner, dict):
            return inner
    return {}


def redacted_params(params: Any, redactions: list[Any]) -> tuple[Any, list[str]]:
    """``params`` with each redaction pointer (relative to ``params["payload"]``)
    replaced by its ``replacement`` or ``[REDACTED]``; the pointers applied."""
    shown = copy.deepcopy(params)
    payload = shown.get("payload") if isinstance(shown, dict) else None
    applied: list[str] = []
    if not isinstance(payload, dict):
        return shown, applied
    for item in redactions:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            continue
        replacement = item.get("replacement", REDACTED)
        try:
            pointer = JsonPointer(item["path"])
            pointer.resolve(payload)  # only a value that is there is replaced
            pointer.set(payload, replacement if isinstance(replacement, str) else REDACTED)
        except (JsonPointerException, TypeError, KeyError, IndexError):
            continue
        applied.append(item["path"])
    return shown, applied


@dataclass(frozen=True)
class RuleView:
    rule_id: str
    policy: str
    description: str
    reasoning: str
    effect: str
    known: bool


def _rules(refs: Any, names: tuple[str, ...], bundle: Bundle, same_bundle: bool) -> list[RuleView]:
    specs = {r.spec.id: r.spec for r in bundle.rules}
    out: list[RuleView] = []
    seen: list[tuple[str, str]] = []
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and isinstance(ref.get("rule_id"), str):
            policy = f"{ref.get('policy_id', '')}@{ref.get('policy_version', '')}".strip("@")
            seen.append((ref["rule_id"], policy))
    if not seen:
        seen = [(name, "") for name in names]
    for rule_id, policy in seen:
        spec = specs.get(rule_id) if same_bundle else None
        out.append(
            RuleView(
                rule_id=rule_id,
                policy=policy,
                # Bundle YAML folds text with a trailing newline: shown as one line.
                description=" ".join((spec.description or "").split()) if spec else "",
                reasoning=" ".join((spec.reasoning or "").split()) if spec else "",
                effect=spec.effect.value if spec else "",
                known=spec is not None,
            )
        )
    return out


def _provenance(session: dict[str, Any], params: Any, codes: tuple[str, ...]) -> dict[str, Any]:
    """The session's provenance producer, each argument's provenance label (origin,
    source, id, derived-from count) and the provenance reason codes."""
    negotiated = session.get("negotiated") if isinstance(session.get("negotiated"), dict) else {}
    producer = str(negotiated.get("provenance_producer") or "") if negotiated else ""
    payload = params.get("payload") if isinstance(params, dict) else None
    args = payload.get("arguments") if isinstance(payload, dict) else None
    labels = []
    if isinstance(args, dict):
        for name in sorted(args):
            value = args[name]
            prov = value.get("provenance") if isinstance(value, dict) else None
            if isinstance(prov, dict):
                derived = prov.get("derived_from")
                labels.append(
                    {
                        "argument": name,
                        "origin": str(prov.get("origin", "")),
                        "source": str(prov.get("source_id", "")),
                        "id": str(prov.get("provenance_id", "")),
                        "derived": len(derived) if isinstance(derived, list) else 0,
                    }
                )
    return {
        "producer": producer or "none declared",
        "labels": labels,
        "codes": [c for c in codes if "provenance" in c or "untrusted" in c or "taint" in c],
    }


def verification(chain: EntryChain, ikm: bytes | None) -> dict[str, Any]:
    """The link check's outcome: ``ok``, a one-line ``summary`` and the ``checks`` made
    (or the failure's ``reason`` and ``message``)."""
    try:
        report = verify_link(
            chain.session,
            chain.previous,
            chain.record,
            following=chain.following,
            head=chain.head,
            ikm=ikm,
        )
    except IntegrityError as exc:
        return {
            "ok": False,
            "summary": "Verification failed",
            "reason": str(exc.reason or "integrity"),
            "message": exc.message,
            "checks": [],
        }
    checks = [
        "the entry's hash recomputes from its content (RFC 8785) and its previous_hash",
    ]
    if report.previous_seq is not None:
        checks.append(f"it links to entry {report.previous_seq}, whose own hash recomputes")
    else:
        checks.append("it is the first entry of its session (no previous_hash)")
    if "request" in chain.record:
        checks.append("the stored request hashes to the entry's request_hash")
    if report.successor_links:
        checks.append(f"entry {chain.record['seq'] + 1} links back to it")
    if report.is_head:
        checks.append("it is the session's signed head")
    if report.signatures_checked:
        signed = ["the session record's"]
        if chain.record.get("response") is not None:
            signed.append("the response's")
        if report.is_head:
            signed.append("the signed head's")
        checks.append(f"{report.signatures_checked} HMAC signature(s) verify: {', '.join(signed)}")
    return {
        "ok": True,
        "summary": "Link verified",
        "reason": "",
        "message": "",
        "checks": checks,
    }


def decision_context(
    chain: EntryChain, prefix: str, bundle: Bundle, ikm: bytes | None
) -> dict[str, Any]:
    """The template context of one entry's decision page."""
    record = chain.record
    entry = record["entry"]
    sid, seq = record["session_id"], record["seq"]
    stored = StoredEntry(
        session_id=sid,
        seq=seq,
        created_at=chain.created_at,
        step_type=str(entry.get("step_type", "")),
        agent_id=str(chain.session.get("agent_id", "")),
        entry=json.dumps(entry),
        request=record.get("request"),
    )
    summary = summarize(stored)
    result = _result(record.get("response"))
    verdict = entry.get("verdict") if isinstance(entry.get("verdict"), dict) else {}
    bundle_ref: dict[str, Any] = (
        verdict["bundle"] if isinstance(verdict.get("bundle"), dict) else {}
    )
    detail: Any = None
    if summary.wire not in ("acs", "mcp"):
        detail = entry.get(summary.wire)
        inner = detail.get("bundle") if isinstance(detail, dict) else None
        if not bundle_ref and isinstance(inner, dict):
            bundle_ref = inner
        policy = detail.get("policy") if isinstance(detail, dict) else None
        if not bundle_ref and isinstance(policy, dict) and isinstance(policy.get("bundle"), dict):
            bundle_ref = policy["bundle"]
        record_policy = (
            detail.get("record", {}).get("policy")
            if isinstance(detail, dict) and isinstance(detail.get("record"), dict)
            else None
        )
        if not bundle_ref and isinstance(record_policy, dict):
            # A KLA policy decision names its bundle as {bundle_id, version, digest}.
            bundle_ref = {
                "id": record_policy.get("bundle_id", ""),
                "version": record_policy.get("version", ""),
                "digest": record_policy.get("digest", ""),
            }
    refs = verdict.get("policy_references")
    if not refs and isinstance(detail, dict) and isinstance(detail.get("record"), dict):
        refs = detail["record"].get("rules")  # a KLA decision lists its rules as refs
    same_bundle = bool(bundle_ref) and bundle_ref.get("digest") == bundle.ref.digest
    params = parse_json(record.get("request"))
    modifications = result.get("modifications") if isinstance(result, dict) else None
    redactions = modifications.get("redactions") if isinstance(modifications, dict) else None
    shown, applied = redacted_params(params, redactions if isinstance(redactions, list) else [])
    policy_data = result.get("policy_data")
    approval = policy_data.get("approval") if isinstance(policy_data, dict) else None
    task_id = approval.get("task_id") if isinstance(approval, dict) else None
    if task_id is None and isinstance(detail, dict) and isinstance(detail.get("task_id"), str):
        task_id = detail["task_id"]
    head = chain.head or {}
    reasoning = str(result.get("reasoning") or "")
    if not reasoning and isinstance(detail, dict):
        # Warden's chains keep the verdict's reasoning in their detail (the desk's task
        # policy, a spend decision's record).
        policy = detail.get("policy")
        found = policy.get("reasoning") if isinstance(policy, dict) else detail.get("reasoning")
        reasoning = found if isinstance(found, str) else ""
    return {
        "summary": summary,
        "session_id": sid,
        "seq": seq,
        "created_at": chain.created_at,
        "timestamp": str(entry.get("timestamp", "")),
        "agent_id": str(chain.session.get("agent_id", "")),
        "key_id": str(chain.session.get("key_id", "")),
        "request": _pretty(shown) if params is not None else "",
        "request_raw_missing": record.get("request") is None,
        "redacted": applied,
        "request_hash": str(entry.get("request_hash", "")),
        "reasoning": reasoning,
        "rules": _rules(refs, summary.rules, bundle, same_bundle),
        "same_bundle": same_bundle,
        "bundle": (
            f"{bundle_ref.get('id', '')}@{bundle_ref.get('version', '')}" if bundle_ref else ""
        ),
        "bundle_digest": str(bundle_ref.get("digest", "")) if bundle_ref else "",
        "running_bundle": f"{bundle.ref.id}@{bundle.ref.version}",
        "modifications": _pretty(modifications) if modifications else "",
        "task_id": task_id if isinstance(task_id, str) else "",
        "detail": _pretty(detail) if detail is not None else "",
        "provenance": _provenance(chain.session, params, summary.reason_codes),
        "entry_hash": str(entry.get("entry_hash", "")),
        "previous_hash": str(entry.get("previous_hash", "")),
        "previous_href": entry_href(prefix, sid, seq - 1) if chain.previous else "",
        "next_href": entry_href(prefix, sid, seq + 1) if chain.following else "",
        "head_seq": head.get("seq", -1),
        "head_hash": str(head.get("chain_hash", "")),
        "closed": bool(head.get("closed")),
        "verification": verification(chain, ikm),
    }
