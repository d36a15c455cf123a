"""Agent-controlled text shown to approvers keeps no control, bidi or zero-width
characters (the CLI and the web desk print through :func:`visible`)."""

from __future__ import annotations

import pytest

from warden.approvals.display import Layout, shown, visible


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("delete_\x1b[32mSAFE\x1b[0m\r\nok", "delete_\\u001b[32mSAFE\\u001b[0m\\u000d\\u000aok"),
        ("/tmp/safe\u202eetc/passwd\u202c", "/tmp/safe\\u202eetc/passwd\\u202c"),
        ("a\u200bb\ufeffc\u2066d", "a\\u200bb\\ufeffc\\u2066d"),
        ("\x00\x7f\x85", "\\u0000\\u007f\\u0085"),
        ("plain ascii, ünïcödé and 日本語", "plain ascii, ünïcödé and 日本語"),
    ],
)
def test_visible(raw: str, shown: str) -> None:
    assert visible(raw) == shown


def test_layout_keeps_its_line_breaks_and_nothing_else() -> None:
    text = Layout('{\n  "a": "x\u202ey\r"\n}')
    assert shown(text) == '{\n  "a": "x\\u202ey\\u000d"\n}'
    assert shown("a\nb") == "a\\u000ab"  # plain text: every line break escaped
