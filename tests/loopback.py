"""Emulators started on loopback by the test fixtures: a free port, waiting until one listens, and a forwarder
that can be cut."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (just released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_listening(server: subprocess.Popen[bytes], port: int, what: str, seconds: float) -> None:
    """Wait until ``server`` accepts connections on ``port``.

    Raises:
        RuntimeError: it exited, or did not listen within ``seconds``.
    """
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start on port {port}") from None
            time.sleep(0.1)


class Forwarder:
    """A port on loopback that forwards each connection to ``127.0.0.1:target`` until :meth:`close`: a service that
    goes away mid-test (connections refused, open ones cut), for emulators shared by a whole session."""

    def __init__(self, target: int) -> None:
        self._target = target
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._open: list[socket.socket] = []
        self._closed = False
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    client.close()
                    return
                upstream = socket.create_connection(("127.0.0.1", self._target))
                self._open += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Refuse new connections and cut every open one."""
        with self._lock:
            self._closed = True
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)  # wakes the thread in accept(), which close() alone does not
            self._server.close()
            for connection in self._open:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
                connection.close()
