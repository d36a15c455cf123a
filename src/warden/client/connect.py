"""Where a client's credential and Warden come from: a key file and a URL, the
environment, or an in-process runtime (tests, embedding).

Environment (used by ``warden hook claude-code`` and :meth:`Client.from_env`):

- ``WARDEN_URL``: Warden's base URL (default ``http://127.0.0.1:8787``) or its ACS
  endpoint (``…/acs``);
- ``WARDEN_AGENT_KEY``: the agent key file written by
  ``warden agents add AGENT --owner P --key-out FILE`` (``{agent_id, key_id, ikm}``,
  mode 0600).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from warden.client.errors import WardenClientError
from warden.crypto.agent_key import Credential, load_agent_key

if TYPE_CHECKING:
    from warden.runtime import Runtime
    from warden.settings import Settings

DEFAULT_URL = "http://127.0.0.1:8787"
URL_ENV = "WARDEN_URL"
KEY_ENV = "WARDEN_AGENT_KEY"
ACS_PATH = "/acs"


def acs_endpoint(url: str) -> str:
    """The ACS endpoint for a base URL (``http://h:p`` → ``http://h:p/acs``); a URL
    already ending in ``/acs`` is kept."""
    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise WardenClientError(f"Warden URL {url!r} is not an http(s) URL")
    return base if base.endswith(ACS_PATH) else base + ACS_PATH


def env_url(url: str | None = None) -> str:
    return url or os.environ.get(URL_ENV) or DEFAULT_URL


def env_credential(key_file: str | Path | None = None) -> Credential:
    """The credential in ``key_file``, else in the file ``$WARDEN_AGENT_KEY`` names.
    Raises :class:`~warden.errors.ConfigError` (unreadable, malformed, readable by
    others) or :class:`WardenClientError` (no file named)."""
    path = key_file or os.environ.get(KEY_ENV)
    if not path:
        raise WardenClientError(
            f"no agent key: pass a key file or set {KEY_ENV} "
            "(warden agents add AGENT --owner P --key-out FILE)"
        )
    return load_agent_key(Path(path))


def in_process_runtime(target: Runtime | Settings) -> tuple[Runtime, bool]:
    """The runtime to talk to and whether the client started it (and so closes it)."""
    from warden.runtime import Runtime
    from warden.settings import Settings

    if isinstance(target, Runtime):
        return target, False
    if isinstance(target, Settings):
        return Runtime.start(target), True
    raise WardenClientError("in_process takes a warden Runtime or Settings")


def runtime_credential(
    runtime: Runtime, agent_id: str | None, credential: Credential | None
) -> Credential:
    """``credential``, or the newest active key of the registered ``agent_id`` on
    ``runtime`` (raises :class:`WardenClientError` if there is none)."""
    if credential is not None:
        return credential
    if agent_id is None or runtime.agents is None:
        raise WardenClientError("in_process needs agent_id= (a registered agent) or credential=")
    active = [k for k in runtime.agents.keys(agent_id) if k.revoked_at is None]
    if not active:
        raise WardenClientError(f"agent {agent_id!r} is not registered or has no active key")
    return runtime.agents.credential(active[-1].key_id)
