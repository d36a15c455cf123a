"""Every documented ``--key-out`` into a home folder creates that folder first in the same
code block: ``warden agents add`` refuses a folder that does not exist (decision 992)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(?:bash|sh|console)?\n(.*?)```", re.S)
KEY_OUT = re.compile(r"--key-out\s+(~/\S+)/[^/\s]+")


def _key_outs() -> list[tuple[str, str, str]]:
    found = []
    for doc in DOC_FILES:
        for block in BLOCK.findall(doc.read_text(encoding="utf-8")):
            for folder in KEY_OUT.findall(block):
                found.append((doc.name, folder, block))
    return found


def test_the_claude_code_registration_is_found() -> None:
    assert {(name, folder) for name, folder, _ in _key_outs()} >= {
        ("README.md", "~/.config/warden"),
        ("integrations.md", "~/.config/warden"),
    }


def test_each_home_folder_is_created_before_its_key_out() -> None:
    missing = [
        (name, folder)
        for name, folder, block in _key_outs()
        if f"mkdir -p {folder}" not in block.split("--key-out")[0]
    ]
    assert missing == []
