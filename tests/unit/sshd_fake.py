"""A tiny in-process SSH server (paramiko) on 127.0.0.1 for preflight tests.

Public-key auth against one authorized key (`authorized`, may be swapped while it runs); `exec`
requests run the command locally with `sh -c` (in `env` when given) and return its stdout and exit
status. `port` binds a chosen port (a server that comes up where a client already waits). No root,
no sshd, loopback only.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from typing import Any

import paramiko


class _Server(paramiko.ServerInterface):
    def __init__(self, sshd: FakeSSHD) -> None:
        self.sshd = sshd

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if key.asbytes() == self.sshd.authorized.asbytes():
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: Any, command: bytes) -> bool:
        def work() -> None:
            # stdout is streamed as it comes (a waiting command shows its first lines at once)
            proc = subprocess.Popen(
                ["/bin/sh", "-c", command.decode()], stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=self.sshd.env,
            )
            assert proc.stdout is not None
            try:
                while chunk := proc.stdout.read1(4096):
                    channel.sendall(chunk)
                channel.send_exit_status(proc.wait(timeout=30))
            except (subprocess.TimeoutExpired, OSError, EOFError, paramiko.SSHException):
                proc.kill()
            finally:
                proc.stdout.close()
            # the client may have gone first (a refused key): nothing left to close cleanly
            with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                channel.close()

        threading.Thread(target=work, daemon=True).start()
        return True


class FakeSSHD:
    def __init__(
        self,
        host_key: paramiko.PKey,
        authorized: paramiko.PKey,
        *,
        port: int = 0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.host_key = host_key
        self.authorized = authorized
        self.env = env
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.transports: list[paramiko.Transport] = []
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self._stop:
                conn.close()
                return
            t = paramiko.Transport(conn)
            t.add_server_key(self.host_key)
            self.transports.append(t)
            try:
                t.start_server(server=_Server(self))
            except (paramiko.SSHException, EOFError, OSError):
                continue

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):  # wakes the accept() (close alone does not, on Linux)
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for t in self.transports:
            t.close()
