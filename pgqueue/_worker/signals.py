"""SIGTERM/SIGINT handlers installed for the length of a run, then put back."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

Handler = Callable[[int, "FrameType | None"], None]


def handle_stop_signals(on_signal: Handler) -> Callable[[], None]:
    """Install ``on_signal`` for SIGTERM and SIGINT; return what restores the previous handlers.

    Only the main thread may install signal handlers: anywhere else nothing is installed and the
    returned function does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, on_signal)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
