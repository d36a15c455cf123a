"""Bundles are loaded whole or not at all: each hostile asset is refused with a ConfigError
whose every line names the file, where (the rule id) and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import AGENTDOJO_POLICY, DEFAULT_POLICY, asset

from warden.errors import ConfigError
from warden.policy import load_bundle, parse_bundle

# asset → the problems it must report, as (where, reason fragment); exactly these, no others.
REFUSALS: dict[str, list[tuple[str, str]]] = {
    "bundle_yaml_error.yaml": [("YAML", "expected the node content, but found '-'")],
    "bundle_unknown_field.yaml": [
        ("rule deny-deletes", "efect: Extra inputs are not permitted"),
        ("rule deny-deletes", "effect: Field required"),
    ],
    "bundle_unknown_top_level_field.yaml": [("bundle", "defaults: Extra inputs are not permitted")],
    "bundle_bad_cel.yaml": [("rule big-transfer", "when: does not compile")],
    "bundle_bad_cel_index.yaml": [
        (
            "rule any-arg",
            "when: does not compile: Failed to parse expression 'args.exists(k, args[k] >)'",
        )
    ],
    "bundle_undefined_variable.yaml": [
        ("rule admin-only", "when: names undefined variable(s) ['request']")
    ],
    "bundle_ask_without_details.yaml": [
        ("rule approve-payments", "effect ask requires `ask` details")
    ],
    "bundle_defer_without_details.yaml": [
        ("rule wait-for-context", "effect defer requires `defer` details")
    ],
    "bundle_deny_without_reasoning.yaml": [("rule no-shell", "effect deny requires `reasoning`")],
    "bundle_warn_on_deny.yaml": [("rule no-shell", "`warn` applies to effect allow only")],
    "bundle_rule_matches_nothing.yaml": [("rule orphan", "a rule needs `hooks`, `tools` or both")],
    "bundle_empty_rules.yaml": [("bundle", "an empty bundle is refused")],
    "bundle_duplicate_rule_ids.yaml": [("bundle", "duplicate rule id 'tools'")],
    "bundle_duplicate_yaml_key.yaml": [("YAML", "found duplicate key 'effect'")],
    "bundle_modify_conflict.yaml": [
        (
            "rule scrub-token",
            "modify: redaction '/arguments/token/value' overlaps another edit target "
            "/arguments/token",
        )
    ],
    "bundle_modify_content_combined.yaml": [
        ("rule rewrite", "modify: modified_content cannot be combined with other edits")
    ],
    "bundle_not_a_mapping.yaml": [("top level", "must be a mapping")],
    "bundle_wrong_format_version.yaml": [("bundle", "warden_bundle: Input should be 1")],
    "bundle_unknown_hook.yaml": [
        (
            "rule no-shell",
            "hooks: Value error, unknown hook 'steps/toolcallrequest' "
            "(did you mean 'steps/toolCallRequest'?); valid hooks: steps/sessionStart, ",
        )
    ],
    "bundle_hook_glob_matches_nothing.yaml": [
        ("rule no-tools", "hook glob 'step/tool*' matches no known method; valid hooks: ")
    ],
    "bundle_blank_reasoning.yaml": [("rule no-shell", "effect deny requires `reasoning`")],
    "bundle_regex_not_re2.yaml": [
        (
            "rule repeated-word",
            r"when: re_find: RE2 cannot compile pattern `(\w+) \1`: invalid escape sequence",
        )
    ],
    "bundle_data_pattern_not_re2.yaml": [
        (
            "bundle",
            r"data.secret_patterns[1]: RE2 cannot compile pattern `password(?=\s*=)`",
        )
    ],
    "bundle_spend_two_amounts.yaml": [
        ("charge payments", "exactly one of `amount` (CEL), `price` or `prices`; got amount, price")
    ],
    "bundle_spend_float_price.yaml": [
        ("charge payments", 'price: Value error, price must be a decimal string such as "0.05"')
    ],
    "bundle_spend_zero_price.yaml": [("charge payments", "price: Value error, price must be > 0")],
    "bundle_spend_bad_currency.yaml": [
        ("charge payments", "currency: Value error, currency must be three uppercase letters")
    ],
    "bundle_spend_bad_budget_id.yaml": [
        ("charge payments", "budget: Value error, budget id 'Shop Budget' must match")
    ],
    "bundle_spend_no_budget.yaml": [
        ("charge payments", "a charge needs exactly one of `budget` and `budget_expr`")
    ],
    "bundle_spend_bad_amount_cel.yaml": [("charge payments", "amount: does not compile")],
    "bundle_spend_actual_reads_args.yaml": [
        ("charge payments", "actual: names undefined variable(s) ['args']")
    ],
    "bundle_spend_duplicate_charge_ids.yaml": [("bundle", "duplicate charge id 'payments'")],
    "bundle_spend_hold_too_long.yaml": [
        ("charge payments", "hold_seconds: Input should be less than or equal to 604800")
    ],
    "bundle_spend_prices_and_tools.yaml": [
        ("charge price-list", "`tools` is implied by `prices` (its keys)")
    ],
    "bundle_spend_unknown_field.yaml": [
        ("charge payments", "amout: Extra inputs are not permitted")
    ],
    "bundle_spend_several_problems.yaml": [
        ("rule pay", "effect: Input should be 'allow'"),
        ("charge payments", "when: does not compile"),
        ("charge fees", 'price: Value error, price must be a decimal string such as "1.5"'),
    ],
    "bundle_several_problems.yaml": [
        ("rule typo-field", "colour: Extra inputs are not permitted"),
        ("rule bad-cel", "when: does not compile"),
        ("rule undefined-var", "when: names undefined variable(s) ['request']"),
        ("rule overlap", "modify: redaction '/arguments/token' overlaps"),
        ("rule ask-bare", "effect ask requires `ask` details"),
        ("bundle", "duplicate rule id 'typo-field'"),
    ],
}


def _problem_blocks(message: str, source: str) -> list[str]:
    """One block per problem: a ``source: …`` line and its continuation lines."""
    blocks: list[str] = []
    for line in message.splitlines():
        if line.startswith(f"{source}: ") or not blocks:
            blocks.append(line)
        else:
            blocks[-1] += "\n" + line
    return blocks


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_bundle_refused_naming_file_rule_and_reason(name: str) -> None:
    path = asset(f"policy/{name}")
    with pytest.raises(ConfigError) as info:
        load_bundle(path)
    err = info.value
    assert err.reason == "bundle_invalid"
    blocks = _problem_blocks(err.message, str(path))
    assert all(b.startswith(f"{path}: ") for b in blocks), err.message
    assert len(blocks) == len(REFUSALS[name]), err.message
    for where, fragment in REFUSALS[name]:
        prefix = f"{path}: {where}: "
        assert any(b.startswith(prefix) and fragment in b for b in blocks), (
            f"no {prefix!r}…{fragment!r} in:\n{err.message}"
        )


def test_every_refusal_asset_is_in_the_table() -> None:
    shipped = {p.name for p in asset("policy").glob("bundle_*.yaml")}
    valid_at_load = {p.name for p in asset("policy").glob("bundle_eval_*.yaml")}
    assert valid_at_load == {"bundle_eval_error.yaml", "bundle_eval_regex_not_re2.yaml"}
    assert shipped - valid_at_load == set(REFUSALS)


def test_several_problems_are_reported_once_each() -> None:
    path = asset("policy/bundle_several_problems.yaml")
    with pytest.raises(ConfigError) as info:
        load_bundle(path)
    blocks = _problem_blocks(info.value.message, str(path))
    assert len(blocks) == len(set(blocks)) == 6


def test_unreadable_bundle_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_bundle(missing)
    assert info.value.message.startswith(f"{missing}: cannot read bundle: ")


def test_non_utf8_bundle_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"warden_bundle: 1\nid: caf\xe9\n")
    with pytest.raises(ConfigError) as info:
        load_bundle(path)
    assert info.value.message.startswith(f"{path}: cannot read bundle: ")


def test_parse_bundle_names_its_source() -> None:
    with pytest.raises(ConfigError) as info:
        parse_bundle("warden_bundle: 1\nid: x\nversion: '1'\nrules: []\n", source="inline.yaml")
    assert info.value.message.startswith("inline.yaml: bundle: ")


@pytest.mark.parametrize("path", [DEFAULT_POLICY, AGENTDOJO_POLICY], ids=["default", "agentdojo"])
def test_shipped_bundles_load(path: Path) -> None:
    bundle = load_bundle(path)
    assert bundle.rules
    assert bundle.ref.digest.startswith("sha256:") and len(bundle.ref.digest) == 7 + 64
    assert len({r.id for r in bundle.rules}) == len(bundle.rules)


def test_digest_ignores_formatting_and_comments() -> None:
    text = "warden_bundle: 1\nid: d\nversion: '1'\nrules:\n  - {id: r, tools: [x], effect: allow}\n"
    reformatted = (
        '# a comment\nwarden_bundle: 1\nid: d\nversion: "1"\nrules:\n'
        "  - id: r\n    tools:\n      - x\n    effect: allow\n"
    )
    changed = text.replace("tools: [x]", "tools: [y]")
    assert parse_bundle(text).ref.digest == parse_bundle(reformatted).ref.digest
    assert parse_bundle(text).ref.digest != parse_bundle(changed).ref.digest
