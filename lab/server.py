"""The lab's HTTP server on 127.0.0.1 (port 0): the fake NVIDIA repo at /, wheels at /wheels/.

In pytest it runs in a thread of the test process (`ThreadedServer`); for `provision lab up` it is a
detached process (`python -m lab.server`) that records its pid and port in files.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import signal
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Faults:
    """Injected failures for the fault tests: a GET or HEAD of a path under a failing prefix is
    answered with an HTTP error status (a mirror that goes down); every refused path is recorded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: dict[str, int] = {}
        self.refused: list[str] = []

    def fail(self, prefix: str, status: int = 503) -> None:
        """Answer every path starting with prefix (e.g. "/compute/cuda/repos/") with status."""
        with self._lock:
            self._rules[prefix] = status

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self.refused.clear()

    def status_for(self, path: str) -> int | None:
        with self._lock:
            for prefix, status in self._rules.items():
                if path.startswith(prefix):
                    self.refused.append(path)
                    return status
        return None


class _QuietHandler(SimpleHTTPRequestHandler):
    faults: Faults | None = None

    def log_message(self, format: str, *args: object) -> None:
        return

    def _refused(self) -> bool:
        status = self.faults.status_for(self.path) if self.faults is not None else None
        if status is None:
            return False
        self.send_error(status, "injected by the lab's fault tests")
        return True

    def do_GET(self) -> None:
        if not self._refused():
            super().do_GET()

    def do_HEAD(self) -> None:
        if not self._refused():
            super().do_HEAD()


def make_server(root: Path, faults: Faults | None = None) -> ThreadingHTTPServer:
    """A server bound to 127.0.0.1 on a free port, serving root (symlinks are followed); paths
    that `faults` names fail."""
    handler_class = type("_Handler", (_QuietHandler,), {"faults": faults})
    handler = functools.partial(handler_class, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    return server


class ThreadedServer:
    """The server in a daemon thread of this process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.faults = Faults()
        self._server = make_server(root, self.faults)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="lab-http", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_detached(root: Path, port_file: Path, pid_file: Path) -> int:
    """Entry point of the detached server: bind, record port and pid, serve until SIGTERM."""
    server = make_server(root)
    pid_file.write_text(f"{os.getpid()}\n", encoding="utf-8")
    port_file.write_text(f"{server.server_address[1]}\n", encoding="utf-8")

    def stop(_sig: int, _frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        with contextlib.suppress(OSError):
            pid_file.unlink()
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.server")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--port-file", required=True, type=Path)
    parser.add_argument("--pid-file", required=True, type=Path)
    args = parser.parse_args(argv)
    return serve_detached(args.root, args.port_file, args.pid_file)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
