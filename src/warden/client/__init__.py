"""The public Python client of Warden's ACS wire (issue 18): :class:`Client` (blocking)
and :class:`AsyncClient` (asyncio), the :class:`Decision` they return, and their
errors. Framework adapters in :mod:`warden.integrations` are thin layers over it.

Modules: :mod:`~warden.client.session` (signed envelopes, verified answers),
:mod:`~warden.client.steps` (ACS payloads), :mod:`~warden.client.decision`,
:mod:`~warden.client.connect` (URL, key file, in-process runtime),
:mod:`~warden.client.sync`, :mod:`~warden.client.aio`, :mod:`~warden.client.errors`.
"""

from warden.client.aio import AsyncClient
from warden.client.decision import Decision
from warden.client.errors import WardenClientError, WardenProtocolError, WardenUnavailable
from warden.client.sync import Client

__all__ = [
    "AsyncClient",
    "Client",
    "Decision",
    "WardenClientError",
    "WardenProtocolError",
    "WardenUnavailable",
]
