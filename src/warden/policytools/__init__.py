"""Offline policy tools: ``warden policy test`` (test cases for a bundle, run through the
real decision path, with rule coverage) and the bundle lint of ``warden policy check``
(docs/policy-testing.md). They sit above the wires: a test case's request is built and
checked as the ACS wire builds and checks it.

Public surface: :func:`load_tests`, :func:`discover_tests`, :class:`PolicyTester`,
:class:`RunReport`, :func:`junit_xml`, :func:`report_json`; lint in :mod:`.lint`.
"""

from warden.policytools.cases import TestFile, discover_tests, load_tests, parse_tests
from warden.policytools.report import junit_xml, report_json
from warden.policytools.run import CaseResult, Outcome, PolicyTester, RunReport

__all__ = [
    "CaseResult",
    "Outcome",
    "PolicyTester",
    "RunReport",
    "TestFile",
    "discover_tests",
    "junit_xml",
    "load_tests",
    "parse_tests",
    "report_json",
]
