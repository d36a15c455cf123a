"""The ``warden.toml`` config file: every ``warden serve`` option as a top-level key.

Keys are the :class:`~warden.settings.Settings` field names (``port``, ``data_dir``,
``database_url``, ``metrics_access``, …; ``docs/configuration.md`` lists them all).
Precedence, highest first: command-line options, ``WARDEN_*`` environment variables,
the config file, the defaults (decision 232). Relative paths in the file are relative
to the file's own folder (decision 233). An unknown key, a value of the wrong type or
a file that is not TOML is a :class:`~warden.errors.ConfigError` naming the file and
the key; nothing starts.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from warden.errors import ConfigError
from warden.settings import Settings

#: The environment variable naming the config file when ``--config`` is not given.
CONFIG_ENV = "WARDEN_CONFIG"


def _path_fields() -> set[str]:
    out: set[str] = set()
    for name, field in Settings.model_fields.items():
        if "Path" in str(field.annotation):
            out.add(name)
    return out


def read_config(path: Path) -> dict[str, Any]:
    """The settings in ``path`` (a TOML table of Settings field names to values).

    Raises ConfigError for an unreadable file, bad TOML, or an unknown key (named).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read it ({exc.strerror})") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path}: not valid TOML: {exc}") from exc
    known = set(Settings.model_fields)
    for key in data:
        if key not in known:
            raise ConfigError(
                f"config file {path}: unknown key {key!r} (see docs/configuration.md for "
                "the keys; they are the names of `warden serve`'s options with _ for -)"
            )
    base = path.parent
    for key in _path_fields() & set(data):
        value = data[key]
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            data[key] = str(base / value)
        elif isinstance(value, str):
            data[key] = str(Path(value).expanduser())
    return data


def load_settings(config: Path | None = None, **given: Any) -> Settings:
    """Settings from ``given`` (the command line; None values are "not given"), then
    ``WARDEN_*`` variables, then ``config`` (a TOML file), then the defaults.

    Raises ConfigError for a bad file or any invalid value (every problem listed).
    """
    from_file = read_config(config) if config is not None else {}
    cli = {k: v for k, v in given.items() if v is not None}

    class _Layered(Settings):
        file_values = from_file

    try:
        layered = _Layered(**cli)
    except ValidationError as exc:
        where = f" (config file {config})" if config is not None else ""
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"invalid settings{where}: {problems}") from exc
    # A plain Settings: the layered subclass is an implementation detail.
    return Settings.model_construct(**layered.model_dump())
