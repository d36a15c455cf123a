"""Compiles the hot path's modules with mypyc at install time (decision 332).

Everything else about the package is in pyproject.toml. The modules are listed in
``src/warden/native_modules.txt``; the build also writes ``warden/native_build.txt``
(each compiled module and the SHA-256 of its source, one per line), which ``warden.native`` reads to
fall back to the ``.py`` files when they changed after the build.

``WARDEN_PURE_PYTHON=1 pip install …`` skips compiling. A failed compile (no C
compiler, say) also leaves a working pure-Python install, with a warning.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
LIST_FILE = SRC / "warden" / "native_modules.txt"


def _listed() -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in LIST_FILE.read_text().splitlines())
    return [line for line in lines if line]


def _module(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _pure_requested() -> bool:
    return os.environ.get("WARDEN_PURE_PYTHON", "").strip().lower() not in (
        "",
        "0",
        "false",
        "no",
        "off",
    )


def _remove_earlier_build() -> None:
    """Delete what an earlier in-place build left in ``src/`` (compiled modules, their
    shared library, the manifest): a pure-Python install of an editable tree compiled
    before is then pure, and a module taken off the list does not keep its old ``.so``."""
    for built in (SRC / "warden").rglob("*.so"):
        built.unlink()
    for built in SRC.glob("warden_native__mypyc.*.so"):
        built.unlink()
    (SRC / "warden" / "native_build.txt").unlink(missing_ok=True)


class BuildNative(build_ext):
    """build_ext that writes the manifest next to the compiled modules, and leaves a
    pure-Python install when the compiler fails."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any compile failure: run as Python
            sys.stderr.write(
                f"warning: compiling Warden's native modules failed ({exc}); "
                "Warden will run as pure Python\n"
            )
            if self.inplace:
                _remove_earlier_build()
            return
        first = next(e.name for e in self.extensions if e.name.startswith("warden."))
        package = Path(self.get_ext_fullpath(first)).parent
        for _ in range(first.count(".") - 1):
            package = package.parent
        digests = {
            _module(p): hashlib.sha256((SRC / p).read_bytes()).hexdigest() for p in _listed()
        }
        (package / "native_build.txt").write_text(
            "".join(f"{name} {digest}\n" for name, digest in sorted(digests.items()))
        )


def _extensions() -> list:
    _remove_earlier_build()
    if _pure_requested():
        return []
    paths = _listed()
    if not paths:
        return []
    from mypyc.build import mypycify

    # The build environment has mypy but not Warden's dependencies: their types are Any
    # here, which changes what mypyc checks at run time, not what the code does.
    config = Path(tempfile.mkdtemp()) / "mypyc.ini"
    config.write_text(
        "[mypy]\npython_version = 3.11\nignore_missing_imports = True\nfollow_imports = silent\n"
    )
    return mypycify(
        ["--config-file", str(config), *(f"src/{p}" for p in paths)],
        opt_level="3",
        group_name="warden_native",
    )


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildNative})
