"""A loopback TCP proxy that a test can cut and restore, to make a server unreachable for a
while without stopping it (the PostgreSQL server is shared by the whole session)."""

from __future__ import annotations

import socket
import threading

from tests._services.procs import free_port


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``host:target_port``; ``stop()`` closes the listener and
    every open connection (clients see the server go away), ``start()`` listens again."""

    def __init__(self, host: str, target_port: int) -> None:
        self.target = (host, target_port)
        self.port = free_port()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self.start()

    def start(self) -> None:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(16)
        self._listener = ls
        self._spawn(self._accept, ls)

    def stop(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
            ls, self._listener = self._listener, None
        for s in [*socks, *([ls] if ls else [])]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self._threads:
            t.join(5)
        self._threads = [t for t in self._threads if t.is_alive()]

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, server]
            self._spawn(self._pipe, client, server)
            self._spawn(self._pipe, server, client)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
