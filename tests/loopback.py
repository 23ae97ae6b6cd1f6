"""Emulators started on loopback by the test fixtures: a free port, and waiting until one listens."""

from __future__ import annotations

import socket
import subprocess
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
