"""The order test modules are handed to pytest-xdist's workers in (decision 310).

``--dist loadscope`` keeps each module on one worker and, by default, hands the modules
out by number of tests, most first. The slowest modules have few tests (a ``warden
serve`` subprocess, the npm AdCP runner, a browser, a replay), so they came last and one
worker ran them alone for the last minutes. Modules known to be slow go first, slowest
first, then the rest by number of tests; ``--no-loadscope-reorder`` in pyproject.toml
keeps this order. The list is a schedule, not a contract: a module missing from it only
runs later. Refresh it from a full run's timings (``--durations=0``, summed per module)
when the suite's tail grows.
"""

from __future__ import annotations

from collections import Counter

import pytest

#: Measured with the whole suite on 2 cores (ninth session), slowest first; the twelfth
#: session's new modules placed by their own timings (doctor now loads keys: ~70 s).
SLOW_MODULES = (
    "tests/cli/test_cli_policy.py",
    "tests/wire/spend/test_spend_wire_http.py",
    "tests/ledger/test_ledger_db_tamper.py",
    "tests/cli/test_cli_json.py",
    "tests/ops/test_doctor.py",
    "tests/wire/kla/test_kla_wire_submit.py",
    "tests/conformance/test_probes.py",
    "tests/spend/test_engine.py",
    "tests/ledger/test_ledger_tamper.py",
    "tests/tlog/test_tamper_matrix.py",
    "tests/wire/spend/test_spend_wire_routes.py",
    "tests/identity/test_agents.py",
    "tests/ledger/test_ledger_export_cli.py",
    "tests/store/test_store_contract.py",
    "tests/tlog/test_log_cli.py",
    "tests/scaleout/test_replicas.py",
    "tests/cli/test_data_dir.py",
    "tests/wire/spend/test_spend_wire_idempotency.py",
    "tests/crypto/test_strict_parse_orjson.py",
    "tests/replay/test_agentdojo_replay.py",
    "tests/adcp/test_official_runner.py",
    "tests/scaleout/test_crash.py",
    "tests/adcp/test_adcp_idempotency.py",
    "tests/server/test_desk_sessions.py",
    "tests/identity/test_agent_review_fixes.py",
    "tests/server/test_group_commit.py",
    "tests/wire/mcp/test_mcp_proxy_fast_path.py",
    "tests/server/test_store_unavailable.py",
    "tests/wire/test_bad_input.py",
    "tests/replay/test_dojo_efficacy.py",
    "tests/integrations/test_claude_code_hook.py",
    "tests/whatif/test_whatif_agentdojo.py",
    "tests/server/test_desk_pages.py",
    "tests/replay/test_efficacy_harness.py",
    "tests/cli/test_cli_markup_in_errors.py",
    "tests/ops/test_metrics.py",
    "tests/crypto/test_verdict_route.py",
    "tests/wire/spend/test_spend_wire_approvals.py",
    "tests/tlog/test_witness_http.py",
    "tests/wire/mcp/test_mcp_proxy_servers.py",
    "tests/crypto/test_jcs_fast.py",
    "tests/adcp/test_adcp_verdicts.py",
    "tests/wire/kla/test_kla_wire_evidence.py",
    "tests/approvals/test_desk_acs.py",
    "tests/adcp/test_adcp_review_fixes.py",
    "tests/adcp/test_adcp_remembered_keys.py",
    "tests/ops/test_config_file.py",
    "tests/ops/test_settings_origin.py",
    "tests/wire/mcp/test_mcp_proxy_http_upstream.py",
    "tests/tlog/test_shutdown_checkpoint.py",
    "tests/wire/mcp/test_mcp_proxy_fresh_user.py",
    "tests/wire/mcp/test_mcp_results.py",
    "tests/integrations/test_openai_agents.py",
    "tests/wire/spend/test_spend_wire_ownership.py",
    "tests/adcp/test_rfc9421_e2e.py",
    "tests/cli/test_cli_approvals.py",
    "tests/wire/mcp/test_mcp_proxy_calls_in_flight.py",
)
_RANK = {path: rank for rank, path in enumerate(SLOW_MODULES)}


def slow_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: SLOW_MODULES in their order, then the other modules by
    number of tests (most first), each module's tests in their collected order."""
    per_module = Counter(item.nodeid.split("::", 1)[0] for item in items)

    def key(item: pytest.Item) -> tuple[int, int, str]:
        module = item.nodeid.split("::", 1)[0]
        return (_RANK.get(module, len(_RANK)), -per_module[module], module)

    items.sort(key=key)  # stable: a module's tests keep their order
