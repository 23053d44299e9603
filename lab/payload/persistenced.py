#!/usr/bin/python3
"""Fake `nvidia-persistenced` (fake nvidia-persistenced package): a tiny forking daemon.

Fails like the real one when the NVIDIA module is not loaded; otherwise writes its pid file and
keeps persistence mode on (nvidia-smi reports `Enabled` while it runs) until SIGTERM.
"""

from __future__ import annotations

import os
import pwd
import signal
import sys
import time
from pathlib import Path

RUN = Path("/run/nvidia-persistenced")
LOADED = Path(os.environ.get("FAKE_NVIDIA_LOADED", "/run/fake-nvidia/loaded"))


def main(argv: list[str]) -> int:
    if not LOADED.exists():
        sys.stderr.write(
            "nvidia-persistenced failed to initialize. Check syslog for more details.\n"
        )
        return 1
    if "--user" in argv:
        user = argv[argv.index("--user") + 1] if argv.index("--user") + 1 < len(argv) else ""
        try:
            pwd.getpwnam(user)
        except KeyError:
            sys.stderr.write(f"nvidia-persistenced failed to initialize: no such user {user!r}.\n")
            return 1
    mode = "0" if "--no-persistence-mode" in argv else "1"
    if os.fork():  # Type=forking: the parent returns once the child wrote its pid file
        for _ in range(50):
            if (RUN / "nvidia-persistenced.pid").exists():
                return 0
            time.sleep(0.05)
        return 1
    os.setsid()
    RUN.mkdir(parents=True, exist_ok=True)
    (RUN / "persistence-mode").write_text(mode + "\n", encoding="utf-8")
    (RUN / "nvidia-persistenced.pid").write_text(f"{os.getpid()}\n", encoding="utf-8")

    def stop(_sig: int, _frame: object) -> None:
        (RUN / "nvidia-persistenced.pid").unlink(missing_ok=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
