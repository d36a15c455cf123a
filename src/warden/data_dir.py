"""The one check of a data directory (``--data-dir``, ``WARDEN_DATA_DIR``, ``data_dir``).

Every command that takes ``--data-dir`` (its option's callback, ``cli_options.DataDir``),
``warden serve`` (:meth:`warden.runtime.Runtime.start`, whatever set it) and ``warden
doctor`` (its ``data_dir`` check) ask :func:`data_dir_problem`, so a path that is a file,
or that cannot be created, is one line (``error: …``, exit 2) everywhere instead of a
traceback from whichever file a command happened to open first (decision 1190).

A usable data directory exists and is a directory, or can be created as ``serve``
creates it (``mkdir -p``): its nearest existing ancestor is a directory this process may
write to. Permission bits do not settle that (root passes ``access(2)`` on ``/proc``,
where ``mkdir`` fails), so when they allow it an empty, uniquely named directory is made
in that ancestor and removed again: nothing is left behind (decision 1191).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from warden.errors import ConfigError


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (as anything: a file is returned too)."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(path.anchor or ".")


def creatable_problem(path: Path) -> str | None:
    """Why a directory at ``path`` (absent) could not be created, or None if it could."""
    ancestor = _nearest_existing(path.absolute())
    if not ancestor.is_dir():
        return f"{ancestor} is not a directory"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"{ancestor} is not writable by this user"
    try:
        probe = tempfile.mkdtemp(prefix=".warden-probe-", dir=ancestor)
    except OSError as exc:
        return f"nothing can be created in {ancestor}: {exc.strerror or exc}"
    os.rmdir(probe)
    return None


def data_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a data directory (one line naming it), or None if it can."""
    try:
        if path.is_dir():
            return None
        exists = os.path.lexists(path)
    except OSError as exc:  # e.g. a path too long, or a component not searchable
        return f"data directory {path} cannot be examined: {exc.strerror or exc}"
    if exists:
        return f"data directory {path} exists and is not a directory"
    why = creatable_problem(path)
    if why is not None:
        return f"data directory {path} does not exist and cannot be created: {why}"
    return None


def check_data_dir(path: Path) -> None:
    """Raise :class:`ConfigError` (exit 2 in the CLI) with :func:`data_dir_problem`'s line."""
    why = data_dir_problem(path)
    if why is not None:
        raise ConfigError(why)
