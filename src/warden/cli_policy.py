"""``warden policy check``, ``explain`` and ``test``: bundles validated, linted,
explained and tested.

A Typer sub-app (:data:`policy_app`) that ``warden.cli`` mounts as ``policy``. Every
command takes ``--json`` (shapes: ``warden/schemas/cli/policy-check.json``,
``policy-explain.json`` and ``policy-test.json``, described in docs/cli-json.md).

Exit codes: 0 every bundle valid (and, with ``check --strict``, lint-clean) / the request
explained / every test passed; 1 a lint warning under ``--strict`` or a failed policy
test; 2 an invalid bundle or test file, an unreadable file, or a request the server would
reject (``explain --json`` then prints ``"ok": false`` with the JSON-RPC error the server
would answer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from warden.cli_options import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE_FOUND,
    HELP_SETTINGS,
    _fail,
    console,
    err_console,
)
from warden.cli_output import print_json, print_line, print_table, table
from warden.errors import WardenError

if TYPE_CHECKING:
    from warden.core.types import ActionRequest
    from warden.errors import ProtocolError
    from warden.policy import Bundle
    from warden.provenance.config import ProvenanceSpec

policy_app = typer.Typer(
    **HELP_SETTINGS, help="Validate and explain policy bundles.", no_args_is_help=True
)

AsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON document (docs/cli-json.md) on stdout.")
]


def _provenance(spec: ProvenanceSpec | None) -> dict[str, Any] | None:
    """policy-check.json's ``provenance``: null when the bundle has no section."""
    if spec is None:
        return None
    return {
        "gates": spec.enabled_gates(),
        "unknown_trust": spec.unknown_trust,
        "inference": spec.inference,
        "consequential_tools": len(spec.consequential_tools),
    }


def _provenance_line(spec: ProvenanceSpec | None) -> str:
    """Whether provenance is on, which gates, how unknown trust is treated."""
    p = _provenance(spec)
    if p is None:
        return "provenance: off"
    gates = p["gates"]
    return (
        f"provenance: on; gates: {', '.join(gates) if gates else 'none'}; "
        f"unknown_trust: {p['unknown_trust']}; inference: {'on' if p['inference'] else 'off'}; "
        f"{p['consequential_tools']} consequential tool pattern(s)"
    )


def _bundle_doc(file: Path, bundle: Bundle) -> dict[str, Any]:
    return {
        "file": str(file),
        "ok": True,
        "bundle": {
            "id": bundle.ref.id,
            "version": bundle.ref.version,
            "digest": bundle.ref.digest,
        },
        "rules": len(bundle.rules),
        "default": bundle.default.value,
        "provenance": _provenance(bundle.provenance),
    }


@policy_app.command("check")
def policy_check(
    files: Annotated[list[Path], typer.Argument(help="Bundle YAML file(s).")],
    tools: Annotated[
        Path | None,
        typer.Option(
            "--tools",
            help="A tool list (an MCP tools/list result, or a JSON list of names): warn "
            "about tool patterns that match none of them.",
        ),
    ] = None,
    budgets: Annotated[
        Path | None,
        typer.Option(
            "--budgets",
            help="The budgets file `warden serve --budgets` loads: warn about charges "
            "naming a budget it does not define.",
        ),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 when lint finds anything.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Validate bundles (YAML, fields, hooks, CEL conditions, RE2 patterns, effect details)
    and lint them: rules that never decide or never fire, effects their hooks do not
    permit, tool patterns matching no listed tool, charges without a budget.

    Prints OK per valid file and a warning per lint finding; exit 2 if any file is
    invalid (every problem is printed), else 1 with --strict and any warning, else 0.
    """
    from warden.policy import load_bundle
    from warden.policytools.lint import lint, read_tool_list

    try:
        tool_list = read_tool_list(tools) if tools is not None else None
        tool_names = tool_list.names if tool_list is not None else None
        budget_ids = None
        if budgets is not None:
            from warden.spend.config import load_budgets

            budget_ids = [b.id for b in load_budgets(budgets)]
    except WardenError as exc:
        raise _fail(exc) from exc
    if tool_list is not None and tool_list.next_cursor is not None:
        # One page only: patterns matching tools of later pages would be flagged falsely.
        print_line(
            err_console,
            f"[yellow]warning:[/yellow] {escape(str(tools))} is one page of a paginated "
            f"tools/list (nextCursor {escape(json.dumps(tool_list.next_cursor))}): its "
            f"{len(tool_list.names)} tools are not all the server's, so unmatched_tool_pattern "
            "may flag patterns that match tools of later pages; fetch every page "
            "(tools/list with each nextCursor) and merge their tools",
        )
    results: list[dict[str, Any]] = []
    warnings = 0
    for file in files:
        try:
            bundle = load_bundle(file)
        except WardenError as exc:
            results.append({"file": str(file), "ok": False, "error": exc.message})
            if not as_json:
                err_console.print(f"[red]invalid bundle[/red]\n{escape(exc.message)}")
            continue
        found = lint(bundle, tools=tool_names, budgets=budget_ids)
        warnings += len(found)
        results.append({**_bundle_doc(file, bundle), "lint": [f.to_json() for f in found]})
        if not as_json:
            print_line(
                console,
                f"[green]OK[/green] {escape(bundle.ref.id)}@{escape(bundle.ref.version)}: "
                f"{len(bundle.rules)} rules, default {bundle.default.value}, "
                f"{bundle.ref.digest}; {escape(_provenance_line(bundle.provenance))}",
            )
            for f in found:
                print_line(
                    console,
                    f"  [yellow]warning[/yellow] {escape(f'[{f.code}]')} {escape(f.message)}",
                )
    valid = all(r["ok"] for r in results)
    code = EXIT_BAD_INPUT if not valid else EXIT_FAILURE_FOUND if strict and warnings else 0
    if as_json:
        # ok is false whenever the exit is not 0 (docs/cli-json.md; decision 630).
        print_json({"ok": code == 0, "warnings": warnings, "files": results})
    if code:
        raise typer.Exit(code)


def _checked_request(body: bytes) -> ActionRequest:
    """The request as the server parses it, in the server's order (wire/acs/offline.py).
    Raises :class:`ProtocolError` as the server would; :class:`typer.Exit` for handshake
    and ping, which policy never sees."""
    from warden.crypto.canonical import parse_strict_json
    from warden.wire.acs.offline import NotEvaluated, checked_message
    from warden.wire.acs.parse import action_request

    try:
        info, params = checked_message(parse_strict_json(body))
    except NotEvaluated as exc:
        err_console.print(
            f"[red]error:[/red] {escape(exc.method)} is answered by the protocol layer; "
            "policy does not evaluate it"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    return action_request(info, params, None)


def _rejected(exc: ProtocolError, as_json: bool) -> typer.Exit:
    """Report the JSON-RPC error the server would answer; the exit to raise."""
    name = exc.code.name.lower()
    pointer = exc.data.get("pointer")
    if as_json:
        print_json(
            {
                "ok": False,
                "rejected": {
                    "code": int(exc.code),
                    "name": name,
                    "pointer": pointer,
                    "message": exc.message,
                },
            }
        )
        return typer.Exit(EXIT_BAD_INPUT)
    err_console.print(
        f"[red]error:[/red] Warden would reject this request with JSON-RPC error "
        f"{int(exc.code)} ({name.replace('_', ' ')})"
    )
    if pointer is not None:
        err_console.print(f"  pointer: {escape(json.dumps(pointer))}")
    err_console.print(f"  message: {escape(exc.message)}")
    return typer.Exit(EXIT_BAD_INPUT)


@policy_app.command("explain")
def policy_explain(
    file: Annotated[Path, typer.Argument(help="Bundle YAML file.")],
    request: Annotated[Path, typer.Argument(help="An ACS request envelope (JSON).")],
    as_json: AsJson = False,
) -> None:
    """Show which rules are candidates for a request, which fire and why, and the verdict.

    The request is first checked as the server checks it (strict JSON, the ACS request
    envelope schema, JCS domain, method routing, the hook's payload schema or the wrapped
    MCP message); a request the server would reject is reported with its JSON-RPC error
    code, JSON pointer and message (exit 2). Signature, session, replay and clock checks
    need a live session and are not applied. A condition that errors is shown as the
    fail-closed verdict the server would sign (deny, ``evaluation_failed``; exit 0).
    """
    from warden.core.guardian import Guardian, fit_to_hook, verdict_from_evaluation
    from warden.core.tool_names import fold
    from warden.errors import CouldNotDecide, ProtocolError
    from warden.policy import PolicyEngine, RuleTrace, load_bundle

    try:
        engine = PolicyEngine(load_bundle(file))
    except WardenError as exc:
        raise _fail(exc) from exc
    try:
        body = request.read_bytes()
    except OSError as exc:
        err_console.print(
            f"[red]error:[/red] cannot read {escape(str(request))}: "
            f"{escape(exc.strerror or str(exc))}"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    try:
        req = _checked_request(body)
    except ProtocolError as exc:
        raise _rejected(exc, as_json) from exc

    failure: str | None = None
    default_applied = False
    try:
        ev = engine.evaluate(req, explain=True)
        trace: tuple[RuleTrace, ...] = ev.trace
        default_applied = ev.default_applied
        verdict = fit_to_hook(verdict_from_evaluation(ev), req.permitted)
    except Exception as exc:  # noqa: BLE001 - the server answers any engine failure this way
        trace = exc.data.get("trace", ()) if isinstance(exc, CouldNotDecide) else ()
        failure = exc.message if isinstance(exc, WardenError) else f"{type(exc).__name__}: {exc}"
        verdict = Guardian(engine).fail_closed(req, failure)
    candidates = [
        {
            "rule": t.rule_id,
            "effect": t.effect.value,
            "fired": "error" if t.failed else "yes" if t.fired else "no",
            "detail": t.detail,
        }
        for t in trace
    ]
    n_rules = len(engine.bundle.rules)
    # Tool patterns match the folded name (warden.core.tool_names): show what they saw.
    folded = fold(req.tool_name)
    if as_json:
        print_json(
            {
                "ok": True,
                "method": req.method,
                "tool": req.tool_name or None,
                "tool_matched_as": folded or None,
                "rules_total": n_rules,
                "candidates": candidates,
                "verdict": {
                    "decision": verdict.decision.value,
                    "reasoning": verdict.reasoning,
                    "reason_codes": list(verdict.reason_codes),
                    "default_applied": default_applied,
                    "fail_closed": failure is not None,
                },
                "evaluation_failed": failure,
            }
        )
        return
    t = table("rule", "effect", "fired", "why")
    for c in candidates:
        t.add_row(escape(c["rule"]), c["effect"], c["fired"], escape(c["detail"]))
    shown = req.tool_name + (f" (matched as {folded})" if folded != req.tool_name else "")
    print_line(
        console,
        f"method {escape(req.method)}, tool {escape(shown or '-')}: "
        + (
            f"{len(trace)} candidate rules of {n_rules}"
            if failure is None
            else f"{len(trace)} candidate rules evaluated before the failure, of {n_rules}"
        ),
    )
    print_table(console, t)
    print_line(
        console,
        f"verdict: [bold]{verdict.decision.value}[/bold]"
        + (" (fail closed)" if failure is not None else " (default)" if default_applied else "")
        + (f" — {escape(verdict.reasoning)}" if verdict.reasoning else ""),
    )
    if verdict.reason_codes:
        print_line(console, f"reason codes: {escape(', '.join(verdict.reason_codes))}")
    if failure is not None:
        print_line(console, f"evaluation failed: {escape(failure)}")


@policy_app.command("test")
def policy_test(
    bundle_file: Annotated[Path, typer.Argument(metavar="BUNDLE", help="Bundle YAML file.")],
    test_files: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="[TESTS]...",
            help="Test YAML file(s); default: tests/BUNDLE_NAME.yaml and "
            "tests/BUNDLE_NAME.*.yaml beside the bundle.",
        ),
    ] = None,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write JUnit XML here (for CI).")
    ] = None,
    require_coverage: Annotated[
        bool,
        typer.Option("--require-coverage", help="Fail (exit 1) when a rule is fired by no test."),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Run a bundle's test cases through the real decision path; report coverage.

    Each case is decided as `warden serve` decides it (the request checked as the server
    checks it, the caller, the session's provenance, the Guardian); the approval desk and
    the spend gate are not run. Prints a pass/fail table and the rules no test fires
    (docs/policy-testing.md). Exit 0 every case passed; 1 a case failed (or, with
    --require-coverage, a rule no test fires); 2 an invalid bundle or test file, or no
    test files found.
    """
    from warden.policy import load_bundle
    from warden.policytools import PolicyTester, discover_tests, junit_xml, load_tests, report_json

    try:
        bundle = load_bundle(bundle_file)
        paths = list(test_files or discover_tests(bundle_file))
        if not paths:
            err_console.print(
                f"[red]error:[/red] no test files for {escape(str(bundle_file))}: give TESTS, "
                f"or put them in {escape(str(bundle_file.parent / 'tests'))}/"
                f"{escape(bundle_file.stem)}.yaml"
            )
            raise typer.Exit(EXIT_BAD_INPUT)
        tester = PolicyTester(bundle)
        files, problems = [], []
        for path in paths:
            try:
                files.append(load_tests(path))
            except WardenError as exc:
                problems.append(exc.message)
        # Every file's problems at once: what the parse found, then what the bundle does
        # not have (an expected rule it lacks, another bundle's id).
        problems += [p for tf in files for p in tester.problems(tf)]
        if problems:
            err_console.print(f"[red]invalid tests[/red]\n{escape(chr(10).join(problems))}")
            raise typer.Exit(EXIT_BAD_INPUT)
        report = tester.run(files)
    except WardenError as exc:
        raise _fail(exc) from exc
    if junit is not None:
        try:
            junit.write_bytes(junit_xml(report))
        except OSError as exc:
            err_console.print(
                f"[red]error:[/red] cannot write {escape(str(junit))}: "
                f"{escape(exc.strerror or str(exc))}"
            )
            raise typer.Exit(EXIT_BAD_INPUT) from exc
    failed = [r for r in report.results if not r.passed]
    uncovered = require_coverage and bool(report.unfired)
    if as_json:
        print_json(report_json(report, require_coverage=require_coverage))
    else:
        t = table("result", "case", "decision", "rules fired")
        for r in report.results:
            got = r.outcome
            t.add_row(
                "[green]PASS[/green]" if r.passed else "[red]FAIL[/red]",
                escape(r.name),
                escape(got.decision or f"error {got.error['name'] if got.error else ''}"),
                escape(", ".join(got.rules) or "-"),
            )
        print_table(console, t)
        for r in failed:
            print_line(console, f"[red]FAIL[/red] {escape(r.file)}: {escape(r.name)}")
            for why in r.failures:
                print_line(console, f"  {escape(why)}")
        n_rules = len(report.fired)
        print_line(
            console,
            f"{len(report.results) - len(failed)} passed, {len(failed)} failed "
            f"({escape(bundle.ref.id)}@{escape(bundle.ref.version)}, "
            f"{len(report.files)} test file(s))",
        )
        print_line(
            console,
            f"coverage: {n_rules - len(report.unfired)} of {n_rules} rules fired by a test"
            + (f"; not fired: {escape(', '.join(report.unfired))}" if report.unfired else ""),
        )
    if failed or uncovered:
        raise typer.Exit(EXIT_FAILURE_FOUND)
