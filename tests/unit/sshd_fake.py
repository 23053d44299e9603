"""A tiny in-process SSH server (paramiko) on 127.0.0.1 for preflight tests.

Public-key auth against one authorized key; `exec` requests run the command locally with
`sh -c` and return its stdout and exit status. No root, no sshd, loopback only.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from typing import Any

import paramiko


class _Server(paramiko.ServerInterface):
    def __init__(self, authorized: paramiko.PKey) -> None:
        self.authorized = authorized

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if key.asbytes() == self.authorized.asbytes():
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: Any, command: bytes) -> bool:
        def work() -> None:
            p = subprocess.run(
                ["sh", "-c", command.decode()], capture_output=True, timeout=30, check=False
            )
            channel.sendall(p.stdout)
            channel.send_exit_status(p.returncode)
            channel.close()

        threading.Thread(target=work, daemon=True).start()
        return True


class FakeSSHD:
    def __init__(self, host_key: paramiko.PKey, authorized: paramiko.PKey) -> None:
        self.host_key = host_key
        self.authorized = authorized
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
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
            t = paramiko.Transport(conn)
            t.add_server_key(self.host_key)
            self.transports.append(t)
            try:
                t.start_server(server=_Server(self.authorized))
            except (paramiko.SSHException, EOFError, OSError):
                continue

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for t in self.transports:
            t.close()
