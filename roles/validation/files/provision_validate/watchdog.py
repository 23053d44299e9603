"""Hang and signal guard for one rank (stdlib only).

A daemon thread turns (a) a phase or collective that outlives its deadline and (b) SIGTERM/SIGINT
(torchrun tearing the group down after another rank failed, or the role's outer ``timeout``) into
a written result fragment followed by ``os._exit``. The signals are blocked in every thread and
taken with ``sigtimedwait`` by the guard thread, because a Python signal handler would not run
while the main thread is blocked inside a C++ collective. ``block_signals()`` must run before
torch is imported so that no thread is left with the signals unblocked.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable, Optional, Tuple

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
EXIT_TIMEOUT = 3

# on_timeout(what, limit_s, elapsed_s) and on_signal(signum)
OnTimeout = Callable[[str, float, float], None]
OnSignal = Callable[[int], None]
# what is armed: (what, limit_s, start, deadline), monotonic clock
Armed = Optional[Tuple[str, float, float, float]]


def block_signals() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)


class Watchdog:
    """``on_timeout(what, limit_s, elapsed_s)`` and ``on_signal(signum)`` write the fragment; the
    watchdog then exits the process (they must not raise)."""

    def __init__(self, on_timeout: OnTimeout, on_signal: OnSignal, tick_s: float = 0.2) -> None:
        self._on_timeout = on_timeout
        self._on_signal = on_signal
        self._tick = tick_s
        self._armed: Armed = None
        self._thread = threading.Thread(target=self._loop, name="pv-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def arm(self, what: str, limit_s: float) -> None:
        now = time.monotonic()
        self._armed = (what, float(limit_s), now, now + float(limit_s))

    def disarm(self) -> None:
        self._armed = None

    def _loop(self) -> None:
        while True:
            try:
                info = signal.sigtimedwait(SIGNALS, self._tick)
            except InterruptedError:  # pragma: no cover
                info = None
            if info is not None:
                signo = info.si_signo if info.si_signo in SIGNALS else signal.SIGTERM
                try:
                    self._on_signal(int(signo))
                finally:
                    os._exit(128 + int(signo))
            armed = self._armed
            if armed is not None and time.monotonic() > armed[3]:
                what, limit, start, _ = armed
                try:
                    self._on_timeout(what, limit, time.monotonic() - start)
                finally:
                    os._exit(EXIT_TIMEOUT)
