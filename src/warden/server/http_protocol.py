"""``warden serve``'s HTTP/1.1 protocol: uvicorn's httptools protocol, one write per response.

uvicorn writes a response's status line and headers when the app sends
``http.response.start`` and its body when the app sends ``http.response.body``: two
``send()`` calls and, with ``TCP_NODELAY``, two TCP segments. The client wakes for the
headers, reads them, and sleeps again until the body arrives, which on a loaded
machine is a second wake-up per request on both sides (bench/RESULTS.md, "Issue 16,
third session"). :class:`CoalescingHttpToolsProtocol` hands uvicorn a transport that
gathers the writes made in one pass of the event loop and sends them as one; the bytes
on the wire, their order and every header are unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    """Wraps an :class:`asyncio.Transport`: writes made in one pass of the event loop
    leave as one ``write`` at the end of that pass (``loop.call_soon``), before the loop
    polls for I/O again, so nothing waits on a timer. ``close``, ``write_eof`` and
    ``set_protocol`` send what is gathered first; ``abort`` drops it, as the wrapped
    transport drops its own buffer. Everything else is the wrapped transport's."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self._pending is None:
            self._pending = [bytes(data)]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Send what is gathered now (a no-op when nothing is)."""
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        gathered = sum(map(len, self._pending)) if self._pending else 0
        return self._transport.get_write_buffer_size() + gathered

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        # A websocket upgrade: the upgrade response goes first, in order.
        self.flush()
        self._transport.set_protocol(protocol)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a :class:`CoalescingTransport`: a response's
    headers and body leave in one write."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        wrapped = CoalescingTransport(transport, self.loop)
        super().connection_made(wrapped)  # type: ignore[arg-type]
