"""The README and docs/ show only commands that exist, and link only to files that exist.

Every ``warden …`` (or ``python -m warden …``) invocation in a shell code block of
README.md or docs/*.md is reduced to its command path (``warden agents add``,
``warden replay agentdojo``) by walking the real click command tree, and
``warden <path> --help`` must exit 0 for each, in-process with typer's CliRunner. A
first word that names no command fails here instead of in a reader's terminal.
``warden hook …`` is checked against its own light app (``warden.cli_hook.hook_app``),
which is what the console script (``warden.launch``) runs for it.

Every relative Markdown link in the same files must name an existing file, and an
``#anchor`` into a Markdown file must match one of its headings (GitHub's slug rule).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from warden.cli import app
from warden.cli_hook import hook_app

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Code-block languages whose lines are shell commands.
SHELL_LANGS = {"bash", "sh", "shell", "console"}

_FENCE = re.compile(r"^(\s*)```\s*([A-Za-z0-9_+-]*)\s*$")
#: ``warden`` as a command word: at a line start or after a shell separator / ``$(``.
_INVOCATION = re.compile(r"(?:^|[\s;&|(`])(?:python3? -m )?warden((?:\s+[^\s;&|)`]+)*)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _shell_lines(text: str) -> list[str]:
    """The logical lines (``\\`` continuations joined, comments cut) of shell blocks."""
    lines: list[str] = []
    lang: str | None = None
    pending = ""
    for raw in text.splitlines():
        fence = _FENCE.match(raw)
        if fence:
            lang = None if lang is not None else fence.group(2).lower()
            pending = ""
            continue
        if lang not in SHELL_LANGS:
            continue
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    return lines


def _command_path(words: list[str]) -> tuple[str, ...]:
    """The subcommand words of one invocation, resolved against the real command tree.

    Raises ``AssertionError`` when the first word names no command of ``warden``.
    """
    # Typer may build its commands on its own copy of click, so the tree is walked by
    # duck typing: a group is a command with ``get_command``.
    group: Any = typer.main.get_command(app)
    path: list[str] = []
    for word in words:
        if not hasattr(group, "get_command"):
            break
        sub = group.get_command(group.context_class(group), word)
        if sub is None:
            # A group takes no positional arguments here: a word after it that names
            # none of its commands is a command that does not exist.
            assert word.startswith("-"), f"`warden {' '.join([*path, word])}` is no warden command"
            break
        path.append(word)
        group = sub
    return tuple(path)


def _documented_commands() -> dict[tuple[str, ...], str]:
    """Each distinct command path shown in the docs, with one place that shows it."""
    found: dict[tuple[str, ...], str] = {}
    for doc in DOC_FILES:
        for line in _shell_lines(doc.read_text(encoding="utf-8")):
            for match in _INVOCATION.finditer(line):
                words = match.group(1).split()
                if not words or words[0].startswith("-"):
                    found.setdefault((), f"{doc.relative_to(ROOT)}: {line.strip()}")
                    continue
                try:
                    path = _command_path(words)
                except AssertionError as exc:
                    found.setdefault(
                        ("<unknown>", *words[:2]), f"{doc.relative_to(ROOT)}: {line.strip()}: {exc}"
                    )
                    continue
                found.setdefault(path, f"{doc.relative_to(ROOT)}: {line.strip()}")
    return found


DOCUMENTED = _documented_commands()


def test_the_docs_show_commands() -> None:
    """The extraction finds the commands the README's tour relies on (guards the regexes)."""
    assert ("serve",) in DOCUMENTED
    assert ("replay", "agentdojo") in DOCUMENTED
    assert ("hook", "claude-code") in DOCUMENTED or ("agents", "add") in DOCUMENTED
    assert len(DOCUMENTED) >= 15


@pytest.mark.parametrize("path", sorted(DOCUMENTED), ids=lambda p: " ".join(p) or "warden")
def test_documented_command_has_help(path: tuple[str, ...]) -> None:
    """``warden <path> --help`` exits 0 for every command the docs show."""
    where = DOCUMENTED[path]
    assert path[:1] != ("<unknown>",), where
    runner = CliRunner()
    if path[:1] == ("hook",):
        result = runner.invoke(hook_app, [*path[1:], "--help"], prog_name="warden hook")
    else:
        result = runner.invoke(app, [*path, "--help"], prog_name="warden")
    assert result.exit_code == 0, f"{where}\n{result.output}"
    assert "Usage:" in result.output


def test_unknown_command_is_caught() -> None:
    """A made-up first word is reported, not silently skipped."""
    with pytest.raises(AssertionError, match="no warden command"):
        _command_path(["frobnicate", "--json"])
    with pytest.raises(AssertionError, match="no warden command"):
        _command_path(["keys", "nosuch"])
    assert _command_path(["keys", "--help"]) == ("keys",)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower(), flags=re.UNICODE)
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    anchors: set[str] = set()
    counts: dict[str, int] = {}
    in_code = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_code = not in_code
            continue
        heading = None if in_code else _HEADING.match(line)
        if heading:
            slug = _slug(heading.group(2))
            n = counts.get(slug, 0)
            counts[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _links() -> list[tuple[Path, str]]:
    links: list[tuple[Path, str]] = []
    for doc in DOC_FILES:
        in_code = False
        for line in doc.read_text(encoding="utf-8").splitlines():
            if _FENCE.match(line):
                in_code = not in_code
                continue
            if in_code:
                continue
            for target in _LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                links.append((doc, target))
    return links


@pytest.mark.parametrize(
    ("doc", "target"), _links(), ids=lambda v: v.name if isinstance(v, Path) else v
)
def test_relative_link_resolves(doc: Path, target: str) -> None:
    """A relative link names an existing file, and its ``#anchor`` a heading there."""
    file_part, _, anchor = target.partition("#")
    dest = (doc.parent / file_part).resolve() if file_part else doc
    assert dest.exists(), f"{doc.relative_to(ROOT)}: link to missing {target}"
    if anchor and dest.suffix == ".md":
        assert anchor in _anchors(dest), (
            f"{doc.relative_to(ROOT)}: no heading #{anchor} in {dest.name}"
        )
