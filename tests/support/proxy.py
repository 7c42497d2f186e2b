"""A TCP proxy for fault injection: bytes flow both ways between a client and an upstream
server, and ``hold()`` keeps what the connections open at that moment send towards the
server (a network that delays a request) until ``release()``. Connections opened while
holding are not held. Real sockets and threads; nothing is parsed."""

from __future__ import annotations

import socket
import threading


class _Link:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.held = bytearray()
        self.holding = False
        self.lock = threading.Lock()


class _Listening:
    """A loopback listener whose ``_accept`` runs in a thread (the proxies below)."""

    def __init__(self, upstream_port: int, host: str) -> None:
        self.host = host
        self.upstream_port = upstream_port
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=f"{type(self).__name__}-accept").start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def _accept(self) -> None:
        raise NotImplementedError


def _close_both(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


class DelayingProxy(_Listening):
    def __init__(self, upstream_port: int = 0, *, host: str = "127.0.0.1") -> None:
        self._links: list[_Link] = []
        super().__init__(upstream_port, host)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((self.host, self.upstream_port))
            except OSError:
                client.close()
                continue
            link = _Link(client, upstream)
            with self._lock:
                self._links.append(link)
            threading.Thread(target=self._pump, args=(link, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(link, False), daemon=True).start()

    def _pump(self, link: _Link, to_server: bool) -> None:
        src, dst = (link.client, link.upstream) if to_server else (link.upstream, link.client)
        try:
            while data := src.recv(65536):
                if to_server:
                    with link.lock:
                        if link.holding:
                            link.held += data
                            continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close_both(src, dst)

    def hold(self) -> None:
        """From now on, keep what the open connections send towards the server."""
        with self._lock:
            for link in self._links:
                with link.lock:
                    link.holding = True

    def held(self) -> bytes:
        with self._lock:
            return b"".join(bytes(link.held) for link in self._links)

    def release(self) -> None:
        """Send everything kept, in order, and stop holding."""
        with self._lock:
            for link in self._links:
                with link.lock:
                    if link.held:
                        link.upstream.sendall(bytes(link.held))
                        link.held.clear()
                    link.holding = False

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for link in self._links:
                for s in (link.client, link.upstream):
                    s.close()


class PartitionProxy(_Listening):
    """A TCP proxy that can cut a link: ``cut()`` closes every open connection and
    refuses new ones (accepted, then closed at once) until ``heal()``. The upstream
    port may be set after the proxy starts (a service that bound port 0).
    ``hold_answers()``: what the server sends is dropped (the requests go through) until
    ``cut()`` closes the connections: a request served whose answer was lost."""

    def __init__(self, upstream_port: int = 0, *, host: str = "127.0.0.1") -> None:
        self._socks: list[socket.socket] = []
        self._cut = False
        self._holding_answers = False
        super().__init__(upstream_port, host)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut or not self.upstream_port:
                client.close()
                continue
            try:
                upstream = socket.create_connection((self.host, self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, upstream]
            for src, dst, answers in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pump, args=(src, dst, answers), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                if not (answers and self._holding_answers):
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            _close_both(src, dst)

    def hold_answers(self) -> None:
        self._holding_answers = True

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            socks, self._socks = self._socks, []
        _close_both(*socks)
        self._holding_answers = False

    def heal(self) -> None:
        self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()
