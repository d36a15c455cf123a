"""The ``warden.toml`` config file: every ``warden serve`` option as a top-level key.

Keys are the :class:`~warden.settings.Settings` field names (``port``, ``data_dir``,
``database_url``, ``metrics_access``, …; ``docs/configuration.md`` lists them all).
Precedence, highest first: command-line options, ``WARDEN_*`` environment variables,
the config file, the defaults (decision 232). Relative paths in the file are relative
to the file's own folder (decision 233). An unknown key, a value of the wrong type or
a file that is not TOML is a :class:`~warden.errors.ConfigError` naming the file and
the key; nothing starts. The file's values are typed, so their types are checked
strictly (decision 1060): ``port = true`` or ``port = "8787"`` is refused, where the
same text in ``WARDEN_PORT`` (a string by nature) is parsed.
"""

from __future__ import annotations

import json
import tomllib
from functools import cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError

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


@cache
def _strict(name: str) -> TypeAdapter[Any]:
    """The type of field ``name`` with its constraints, to check a file value against."""
    field = Settings.model_fields[name]
    hint: Any = Annotated[field.annotation, field]  # a runtime-built type for mypy
    return TypeAdapter(hint)


#: What tomllib returns, by the TOML name a message uses (bool before int: a bool is one).
_TOML_KINDS: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "float"),
    (str, "string"),
    (list, "array"),
    (dict, "table"),
)


def _toml_kind(value: object) -> str:
    kind = next((name for t, name in _TOML_KINDS if isinstance(value, t)), "date or time")
    return f"a TOML {kind}"


def _type_errors(data: dict[str, Any]) -> list[str]:
    """``key: message`` for each value in ``data`` whose TOML type is not its field's.

    Each value is checked as JSON in pydantic's strict mode: a TOML boolean only for a
    bool, an integer only for an int (a float also takes an integer), a string for a str,
    a Path or a choice, an array for a tuple. Only type errors are kept: a value of the
    right type but out of range or not one of the choices is left to the settings model,
    whose own validators run (``log_level = "info"`` is upper-cased there)."""
    out = []
    for key, value in data.items():
        # A TOML date or time has no JSON form: an object, which no field type accepts.
        text = json.dumps(value, default=lambda _: {})
        try:
            _strict(key).validate_json(text, strict=True)
        except ValidationError as exc:
            for e in exc.errors():
                if e["type"].endswith("_type"):
                    where = ".".join([key, *(str(p) for p in e["loc"])])
                    out.append(f"{where}: {e['msg']}, not {_toml_kind(value)}")
    return out


def read_config(path: Path) -> dict[str, Any]:
    """The settings in ``path`` (a TOML table of Settings field names to values).

    Raises ConfigError for an unreadable file, bad TOML, an unknown key (named), or a
    value whose TOML type is not the key's (every one named, in the same form as
    :func:`load_settings`'s "invalid settings").
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
    wrong = _type_errors(data)
    if wrong:
        raise ConfigError(f"invalid settings (config file {path}): {'; '.join(wrong)}")
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
