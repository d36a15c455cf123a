"""Which shipped AdCP schema checks each task's request and response.

Requests are validated before anything else (idempotency cache included, §1.5 rule 1):
a request that fails is ``INVALID_REQUEST`` with RFC 6901 ``issues``. Responses are
checked by the tests (every kind of answer), against the task schema and the seed
envelope ``core/protocol-envelope.json``. The files live in ``warden/schemas/adcp``
(see its README for provenance); nothing is fetched at run time.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from warden.adcp.errors import AdcpError
from warden.schemas import SchemaSet, schema_set

#: task → (request schema or None, response schema).
TASK_SCHEMAS: dict[str, tuple[str | None, str]] = {
    "get_adcp_capabilities": (None, "protocol/get-adcp-capabilities-response.json"),
    "sync_plans": ("governance/sync-plans-request.json", "governance/sync-plans-response.json"),
    "check_governance": (
        "governance/check-governance-request.json",
        "governance/check-governance-response.json",
    ),
    "report_plan_outcome": (
        "governance/report-plan-outcome-request.json",
        "governance/report-plan-outcome-response.json",
    ),
    "report_plan_adjustment": (
        "governance/report-plan-adjustment-request.json",
        "governance/report-plan-adjustment-response.json",
    ),
    "get_plan_audit_logs": (
        "governance/get-plan-audit-logs-request.json",
        "governance/get-plan-audit-logs-response.json",
    ),
    "get_task_status": (
        "protocol/get-task-status-request.json",
        "protocol/get-task-status-response.json",
    ),
}
ENVELOPE = "core/protocol-envelope.json"
#: The answer to an async submission (``status: submitted``), whatever the task.
SUBMITTED = "core/compact-task-submitted.json"
MAX_ISSUES = 10
#: A readable message for a top-level ``anyOf`` miss (the validator's names no field).
ANY_OF_HINTS = {
    "get_plan_audit_logs": "send at least one of plan_ids, portfolio_plan_ids or "
    "governance_contexts",
}


@cache
def adcp_schemas() -> SchemaSet:
    """The compiled AdCP schema set (loaded once; a missing file stops start-up)."""
    return schema_set("adcp")


def _keyword(kind: Any) -> str:
    name = type(kind).__name__
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_") or "schema"


def check_request(task: str, request: dict[str, Any]) -> None:
    """Raise ``INVALID_REQUEST`` (with ``issues`` and ``field``) unless ``request`` is
    valid for ``task``'s request schema."""
    path = TASK_SCHEMAS[task][0]
    if path is None:
        return
    validator = adcp_schemas().validator(path)
    if validator.is_valid(request):
        return
    issues = []
    for err in validator.iter_errors(request):
        pointer = "".join(
            "/" + str(p).replace("~", "~0").replace("/", "~1") for p in err.instance_path
        )
        issues.append({"pointer": pointer, "message": err.message, "keyword": _keyword(err.kind)})
        if len(issues) >= MAX_ISSUES:
            break
    first = issues[0]
    if first["keyword"] == "any_of" and not first["pointer"] and task in ANY_OF_HINTS:
        first["message"] = ANY_OF_HINTS[task]
    field = _jsonpath(first["pointer"]) if first["pointer"] else None
    missing = _missing_property(first)
    if missing is not None and field is None:
        field = missing
    raise AdcpError(
        "INVALID_REQUEST",
        f"the {task} request does not match its schema: {first['message']}"
        + (f" at {first['pointer']}" if first["pointer"] else ""),
        field=field,
        issues=issues,
    )


def _missing_property(issue: dict[str, Any]) -> str | None:
    if issue["keyword"] != "required":
        return None
    text = str(issue["message"])
    return text.split('"')[1] if text.count('"') >= 2 else None


def _jsonpath(pointer: str) -> str:
    """``/plans/0/budget`` → ``plans[0].budget`` (error.json's JSONPath-lite)."""
    out = ""
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        out += f"[{part}]" if part.isdigit() else ("." if out else "") + part
    return out


def response_errors(task: str, body: dict[str, Any]) -> list[str]:
    """Every schema violation of a response ``body`` (empty when valid): the envelope,
    and the task schema unless the body is an async submission or a failure."""
    schemas = adcp_schemas()
    paths = [ENVELOPE]
    status = body.get("status")
    if status == "submitted":
        paths.append(SUBMITTED)
    elif status != "failed":
        paths.append(TASK_SCHEMAS[task][1])
    out = []
    for path in paths:
        for err in schemas.validator(path).iter_errors(body):
            out.append(f"{path}: {list(err.instance_path)}: {err.message}")
    return out


PREFIX = "https://adcontextprotocol.org/schemas/3.2.0-beta.0/"


@cache
def bundled_request_schema(task: str) -> dict[str, Any] | None:
    """``task``'s request schema as one self-contained JSON Schema (draft-07), for an
    MCP tool's ``inputSchema``: every schema it references is inlined under
    ``definitions`` and every ``$ref`` rewritten to point there, so a client needs no
    registry. None for a task without a request schema."""
    path = TASK_SCHEMAS[task][0] if task in TASK_SCHEMAS else None
    if path is None:
        return None
    docs = adcp_schemas().docs
    keys: dict[str, str] = {}
    pending = [path]
    while pending:
        rel = pending.pop()
        if rel in keys:
            continue
        keys[rel] = rel.removesuffix(".json").replace("/", "__")
        pending.extend(_refs(docs[rel]))

    def rewrite(node: Any, base: str | None) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k in ("$id", "$schema"):
                    continue
                if k == "$ref" and isinstance(v, str):
                    out[k] = _local(v, base, keys)
                else:
                    out[k] = rewrite(v, base)
            return out
        if isinstance(node, list):
            return [rewrite(v, base) for v in node]
        return node

    root: dict[str, Any] = rewrite(docs[path], None)
    definitions = dict(root.get("definitions") or {})
    for rel, key in keys.items():
        if rel != path:
            definitions[key] = rewrite(docs[rel], key)
    root["definitions"] = definitions
    root["$schema"] = "http://json-schema.org/draft-07/schema#"
    return root


def _refs(node: Any) -> list[str]:
    out: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v.startswith(PREFIX):
                out.append(v[len(PREFIX) :].split("#")[0])
            else:
                out.extend(_refs(v))
    elif isinstance(node, list):
        for v in node:
            out.extend(_refs(v))
    return out


def _local(ref: str, base: str | None, keys: dict[str, str]) -> str:
    """A ``$ref`` inside the bundle: another file's ``#/definitions/<key>`` (plus its
    fragment), or a fragment of the current file (``base``; the root keeps its own)."""
    if ref.startswith(PREFIX):
        rel, _, fragment = ref[len(PREFIX) :].partition("#")
        return f"#/definitions/{keys[rel]}" + fragment
    if ref.startswith("#") and base is not None:
        return f"#/definitions/{base}" + ref[1:]
    return ref
