"""Ways to take a test's database away from a running Warden, per backend.

``TcpProxy`` stands between Warden and the PostgreSQL server: ``down()`` drops every
connection and refuses new ones (a server that stopped or a network that split),
``up()`` lets connections through again. ``damage``/``repair`` rename a table under
the store (a database that can no longer be read: the store's reads fail the way they
do on an I/O error), on either backend. ``hold_write_lock`` keeps the database's write
lock from another connection (SQLite ``BEGIN IMMEDIATE``; PostgreSQL a ``SHARE`` lock on
``server_secrets``, which every insert into it waits for, or an ``EXCLUSIVE`` lock on
every table)."""

from __future__ import annotations

import socket
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from warden.store.schema import metadata


class TcpProxy:
    """A loopback TCP forwarder to ``target`` that can be switched off."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.accepting = True
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, database_url: str) -> str:
        """``database_url`` pointed at this proxy."""
        return make_url(database_url).set(port=self.port).render_as_string(hide_password=False)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.accepting:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        """Drop every connection and refuse new ones."""
        self.accepting = False
        with self.lock:
            for s in self.sockets:
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self.sockets.clear()

    def up(self) -> None:
        self.accepting = True

    def close(self) -> None:
        self.down()
        self.listener.close()


def _execute(database_url: str, sql: str) -> None:
    engine = create_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


def damage(database_url: str, table: str = "api_keys") -> None:
    """Rename ``table`` away: every read of it fails until :func:`repair`."""
    _execute(database_url, f"ALTER TABLE {table} RENAME TO {table}_gone")


def repair(database_url: str, table: str = "api_keys") -> None:
    _execute(database_url, f"ALTER TABLE {table}_gone RENAME TO {table}")


@contextmanager
def hold_write_lock(database_url: str, *, every_table: bool = False) -> Iterator[None]:
    """Hold a lock that keeps Warden's writes waiting, from another connection.

    ``every_table``: on PostgreSQL, an ``EXCLUSIVE`` lock on every Warden table (reads
    go on, every write waits), as SQLite's ``BEGIN IMMEDIATE`` does to the whole file.
    """
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        conn = sqlite3.connect(str(url.database), isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    engine = create_engine(database_url)
    try:
        with engine.connect() as c:
            tx = c.begin()
            if every_table:
                names = ", ".join(t.name for t in metadata.sorted_tables)
                c.execute(text(f"LOCK TABLE {names} IN EXCLUSIVE MODE"))
            else:
                c.execute(text("LOCK TABLE server_secrets IN SHARE MODE"))
            try:
                yield
            finally:
                tx.rollback()
    finally:
        engine.dispose()
