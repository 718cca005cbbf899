"""Ctrl-C in the long commands (`bench`, `train`): the first stops the work and keeps what is
finished, a second aborts at once.

The first SIGINT raises KeyboardInterrupt in the main thread, as Python's own handler does, and
sets `STOP`, so that work on other threads (a live bench's strategy runs side by side, the
training's episode samplers) ends at its next measurement instead of being waited for
(`Tuner` checks it). The command then writes what is finished and exits 130. A second SIGINT,
while that is written (plots of a long bench take seconds), exits 130 at once with one line.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

STOP = threading.Event()
"""set by the first Ctrl-C under `first_stops_second_aborts`; cleared when it ends"""

INTERRUPTED = 130
"""exit status after Ctrl-C (128 + SIGINT), as a shell reports it"""


def requested() -> bool:
    """Whether the user has asked the work to stop (threads other than the main one poll it)."""
    return STOP.is_set()


@contextmanager
def first_stops_second_aborts() -> Iterator[None]:
    """Within it, the first Ctrl-C raises KeyboardInterrupt and sets `STOP`; a second exits the
    process at once. A process started with SIGINT ignored (nohup, a background job of a
    script) keeps ignoring it, and off the main thread nothing is changed (Python allows
    signal handlers there only)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if STOP.is_set():
            sys.stderr.write("interrupted again: aborted at once, nothing more written\n")
            sys.stderr.flush()
            os._exit(INTERRUPTED)  # no clean-up: that is what the second Ctrl-C asks for
        STOP.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        STOP.clear()
