"""``warden.strict_yaml.load``: libyaml's speed, the pure-Python parser's words (decision 308)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from warden import strict_yaml

ROOT = Path(__file__).resolve().parents[2]
#: Every YAML file Warden ships or documents: bundles, budgets, webhooks, policy tests.
SHIPPED = sorted(
    p
    for folder in ("src/warden", "examples", "tests/assets")
    for p in (ROOT / folder).rglob("*.y*ml")
    if p.suffix in {".yaml", ".yml"}
)


def test_pyyaml_here_has_libyaml() -> None:
    # The fast path is what the product runs: a PyYAML without libyaml would make the
    # equality test below compare the pure-Python loader with itself.
    assert strict_yaml._FastUniqueKeyLoader is not None


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_libyaml_reads_every_shipped_file_as_the_pure_python_loader_does(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    try:
        slow = yaml.load(text, Loader=strict_yaml.UniqueKeyLoader)
    except yaml.YAMLError as exc:
        with pytest.raises(yaml.YAMLError) as fast:
            strict_yaml.load(text)
        assert str(fast.value) == str(exc)
        return
    assert strict_yaml.load(text) == slow


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: 1\na: 2\n", "found duplicate key 'a'"),
        ("{a: 1, a: 1}", "found duplicate key 'a'"),
        ("a: [1, 2\n", "expected ',' or ']', but got '<stream end>'"),
        ("a:\n  - b\n c: d\n", "expected <block end>, but found '<block mapping start>'"),
    ],
)
def test_a_refused_document_is_worded_with_the_line_and_a_caret(text: str, words: str) -> None:
    with pytest.raises(yaml.YAMLError) as refused:
        strict_yaml.load(text)
    message = str(refused.value)
    assert words in message
    assert "^" in message  # the pure-Python parser quotes the line and points at it


def test_only_safe_tags() -> None:
    with pytest.raises(yaml.YAMLError):
        strict_yaml.load("!!python/object/apply:os.system ['true']")
