"""A policy test run as JSON (``warden policy test --json``) and as JUnit XML (``--junit``).

The JSON shape is ``warden/schemas/cli/policy-test.json`` (docs/cli-json.md). The XML
is the JUnit format CI systems read (one ``<testsuite>`` per test file, one
``<testcase>`` per case, a ``<failure>`` per failed case; the coverage report rides in
``<system-out>`` of a final ``coverage`` suite's properties). It is written with
:mod:`xml.etree.ElementTree`, which escapes text and attributes.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from warden.policytools.run import RunReport


def report_json(report: RunReport, *, require_coverage: bool = False) -> dict[str, Any]:
    """The run as one JSON document (policy-test.json). ``ok`` is false when a case
    failed or, with ``require_coverage``, a rule is fired by no case: exactly when
    ``warden policy test`` exits 1 (decision 630)."""
    b = report.bundle
    failed = sum(1 for r in report.results if not r.passed)
    return {
        "ok": report.passed and not (require_coverage and report.unfired),
        "bundle": {"id": b.ref.id, "version": b.ref.version, "digest": b.ref.digest},
        "bundle_file": b.source,
        "files": report.files,
        "cases": len(report.results),
        "passed": len(report.results) - failed,
        "failed": failed,
        "results": [
            {
                "file": r.file,
                "name": r.name,
                "passed": r.passed,
                "failures": list(r.failures),
                "got": r.outcome.to_json(),
            }
            for r in report.results
        ],
        "coverage": {
            "rules": len(report.fired),
            "fired": len(report.fired) - len(report.unfired),
            "unfired": report.unfired,
            "by_rule": dict(report.fired),
        },
    }


def junit_xml(report: RunReport) -> bytes:
    """The run as JUnit XML (UTF-8, with an XML declaration)."""
    root = ET.Element("testsuites", name=f"warden policy test {report.bundle.ref.id}")
    total = failures = 0
    seconds = 0.0
    for file in report.files:
        results = [r for r in report.results if r.file == file]
        failed = [r for r in results if not r.passed]
        took = sum(r.seconds for r in results)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=file,
            tests=str(len(results)),
            failures=str(len(failed)),
            errors="0",
            skipped="0",
            time=f"{took:.6f}",
        )
        for r in results:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"{report.bundle.ref.id}.{file}",
                name=r.name,
                time=f"{r.seconds:.6f}",
            )
            if not r.passed:
                failure = ET.SubElement(case, "failure", message=r.failures[0], type="mismatch")
                failure.text = "\n".join(r.failures)
        total += len(results)
        failures += len(failed)
        seconds += took
    coverage = ET.SubElement(
        root, "testsuite", name="coverage", tests="0", failures="0", errors="0", skipped="0"
    )
    props = ET.SubElement(coverage, "properties")
    for rid, n in report.fired.items():
        ET.SubElement(props, "property", name=f"rule:{rid}", value=str(n))
    out = ET.SubElement(coverage, "system-out")
    out.text = (
        "rules no test fires: " + ", ".join(report.unfired)
        if report.unfired
        else "every rule is fired by at least one test"
    )
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", "0")
    root.set("time", f"{seconds:.6f}")
    ET.indent(root)
    out_bytes: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return out_bytes
