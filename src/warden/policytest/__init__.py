"""``warden policy test``: test cases for a policy bundle, run through the real
decision path, with rule coverage (docs/policy-testing.md).

Public surface: :func:`load_tests`, :func:`discover_tests`, :class:`PolicyTester`,
:class:`RunReport`, :func:`junit_xml`.
"""

from warden.policytest.cases import TestFile, discover_tests, load_tests, parse_tests
from warden.policytest.report import junit_xml, report_json
from warden.policytest.run import CaseResult, Outcome, PolicyTester, RunReport

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
