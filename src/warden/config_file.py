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

An invalid value, wherever it was set, is one line naming the setting, pydantic's reason
and where the value came from, as the user wrote it there: the environment variable
(``WARDEN_GC_FREEZE='maybe'``), the file and key (``port = 70000``) or the command-line
option (``--port 70000``) (decision 1171).
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from datetime import date, time
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

from pydantic import TypeAdapter, ValidationError
from pydantic_settings import SettingsError

from warden.errors import ConfigError
from warden.settings import Settings

if TYPE_CHECKING:
    import typer

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


#: The longest value an error message quotes (then cut, with "…").
_SHOWN_MAX = 120


def shown(text: str) -> str:
    """``text`` fit to quote in a one-line message: a URL's password masked, cut at
    :data:`_SHOWN_MAX` characters."""
    if "://" in text:
        try:
            password = urlsplit(text).password
        except ValueError:
            password = None
        if password:
            text = text.replace(f":{password}@", ":***@", 1)
    return text if len(text) <= _SHOWN_MAX else text[:_SHOWN_MAX] + "…"


def _toml_value(value: object) -> str:
    """A file's value written back as TOML (JSON's strings, numbers, booleans and arrays
    are TOML's; a date or time is its ISO text)."""
    if isinstance(value, str):
        return json.dumps(shown(value), ensure_ascii=False)
    if isinstance(value, date | time):  # a datetime is a date
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")  # not JSON's
    return shown(json.dumps(value, ensure_ascii=False, default=str))


def _in_file(config: Path, key: str, value: object) -> str:
    return f"config file {config}: {key} = {_toml_value(value)}"


def _env_variable(name: str) -> tuple[str, str] | None:
    """The ``WARDEN_*`` variable that sets field ``name`` and its text, as pydantic-settings
    finds it (names match in any case; of two spellings, the later one wins)."""
    wanted = f"{Settings.model_config.get('env_prefix', '')}{name}".lower()
    found = [(k, v) for k, v in os.environ.items() if k.lower() == wanted]
    return found[-1] if found else None


def _from_command_line(name: str, value: object, ctx: typer.Context | None) -> str:
    """Where a value ``load_settings`` was given came from: the running command's option
    as typed, or the variable that option read it from."""
    flag = "--" + name.replace("_", "-")
    param = next((p for p in ctx.command.params if p.name == name), None) if ctx else None
    if ctx is not None and param is not None:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name == "ENVIRONMENT" and isinstance(param.envvar, str):
            return f"environment: {param.envvar}={shown(os.environ.get(param.envvar, ''))!r}"
        flag = max(param.opts, key=len, default=flag)
        value = ctx.params.get(name, value)  # as parsed, before the command's own touches
    text = shown(str(value))
    return f"option: {flag} {repr(text) if isinstance(value, str) else text}"


def _origin(
    name: str,
    given: Mapping[str, Any],
    from_file: Mapping[str, Any],
    config: Path | None,
    ctx: typer.Context | None,
) -> str:
    """Where the value of setting ``name`` came from, in the layers' order (the command
    line, ``WARDEN_*`` variables, the file); "" for a default."""
    if name in given:
        return _from_command_line(name, given[name], ctx)
    variable = _env_variable(name)
    if variable is not None:
        return f"environment: {variable[0]}={shown(variable[1])!r}"
    if config is not None and name in from_file:
        return _in_file(config, name, from_file[name])
    return ""


def _type_errors(data: dict[str, Any], config: Path | None = None) -> list[str]:
    """``key: message (config file …: key = value)`` for each value in ``data`` whose TOML
    type is not its field's (without the parenthesis when ``config`` is None).

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
                    origin = f" ({_in_file(config, key, value)})" if config is not None else ""
                    out.append(f"{where}: {e['msg']}, not {_toml_kind(value)}{origin}")
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
    wrong = _type_errors(data, path)
    if wrong:
        raise ConfigError(f"invalid settings: {'; '.join(wrong)}")
    base = path.parent
    for key in _path_fields() & set(data):
        value = data[key]
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            data[key] = str(base / value)
        elif isinstance(value, str):
            data[key] = str(Path(value).expanduser())
    return data


def load_settings(
    config: Path | None = None, *, ctx: typer.Context | None = None, **given: Any
) -> Settings:
    """Settings from ``given`` (the command line; None values are "not given"), then
    ``WARDEN_*`` variables, then ``config`` (a TOML file), then the defaults.

    ``ctx``, the running command's, tells an error whether a given value was typed as
    its option or read by the option from its environment variable (names as in
    ``given``); without it a given value is reported as an option.

    Raises ConfigError for a bad file or any invalid value (every problem listed, each
    with where its value came from: see the module docstring).
    """
    from_file = read_config(config) if config is not None else {}
    cli = {k: v for k, v in given.items() if v is not None}

    class _Layered(Settings):
        file_values = from_file

    try:
        layered = _Layered(**cli)
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            name = str(e["loc"][0]) if e["loc"] else ""
            origin = (
                _origin(name, cli, from_file, config, ctx) if name in Settings.model_fields else ""
            )
            where = ".".join(str(p) for p in e["loc"]) or "settings"
            problems.append(f"{where}: {e['msg']}" + (f" ({origin})" if origin else ""))
        raise ConfigError(f"invalid settings: {'; '.join(problems)}") from exc
    except SettingsError as exc:
        # A list setting's variable is JSON; pydantic-settings raises, unformatted, when it
        # is not (``WARDEN_EVIDENCE_SIGNING_KEYS=ed25519`` was a traceback).
        found = re.search(r'field "(\w+)"', str(exc))
        name = found.group(1) if found else ""
        if name not in Settings.model_fields:
            raise ConfigError(f"invalid settings: {exc}") from exc
        default = Settings.model_fields[name].default
        example = json.dumps(list(default) if isinstance(default, tuple) else default)
        origin = _origin(name, cli, from_file, config, ctx)
        raise ConfigError(
            f"invalid settings: {name}: not JSON: a variable sets it as JSON, such as "
            f"{example}" + (f" ({origin})" if origin else "")
        ) from exc
    # A plain Settings: the layered subclass is an implementation detail.
    return Settings.model_construct(**layered.model_dump())
