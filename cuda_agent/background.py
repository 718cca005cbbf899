"""Work on a daemon thread whose result is a future: what a run may stop waiting for.

A strategy's modelling or listing of a large space can take seconds that a time limit or Ctrl-C
does not leave it; a thread of `concurrent.futures`' pools is joined when the interpreter exits,
so a run that stopped waiting would still not end until that work did. A daemon thread is not
joined: the run ends on time, and the work is dropped with the process.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, Callable


def in_background(fn: Callable[..., Any], *args: Any, name: str = "cuda-agent-background"
                  ) -> Future:
    """fn(*args) on a daemon thread of its own; its result (or exception) in the future."""
    future: Future = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return  # cancelled before it began
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - raised where the result is asked for
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
