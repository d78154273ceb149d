"""The process's helper thread for work a search does while a remote model's call waits (issue 56).

A request's latency against a remote model is its waits plus what is computed between them. ``budget_search``
hands the rows its later rounds draw on to this one thread (``helper``) while round one's call is out
(``when``: a job starts once the call has; started earlier, it would take the GIL from the work before the
call). One thread, process-wide: while another search runs in the process (``counted``), there is none, since
the waits are then not idle and a second thread only adds switches between threads."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["CallStart", "counted", "helper", "running", "second_thread", "when"]

T = TypeVar("T")

_POOLS: dict[tuple[int, str], ThreadPoolExecutor] = {}  # per process id and use: a forked child has none of its parent's threads
_RUNNING = [0]  # searches in flight in this process (``counted``)
_RUNNING_LOCK = threading.Lock()


def counted(search: Callable[..., T]) -> Callable[..., T]:
    """``search`` counting itself among the searches in flight in this process while it runs."""

    @functools.wraps(search)
    def run(*args: Any, **kwargs: Any) -> T:
        with _RUNNING_LOCK:
            _RUNNING[0] += 1
        try:
            return search(*args, **kwargs)
        finally:
            with _RUNNING_LOCK:
                _RUNNING[0] -= 1

    return run


def running() -> int:
    """How many searches are in flight in this process (``counted``)."""
    return _RUNNING[0]


def helper() -> ThreadPoolExecutor | None:
    """This process's helper thread, for a search counted among those in flight; None while another runs: then the
    waits are not idle, and a helper thread only adds switches between threads (4 clients at once against a
    served forest: 32 -> 24-29 answers a second with it)."""
    if _RUNNING[0] > 1:
        return None
    return _one_thread("budget-search-ahead")


def second_thread() -> ThreadPoolExecutor:
    """This process's thread for the second half of a compiled kernel's rows that release the GIL (a student's long
    descent), apart from ``helper``, which may still hold an earlier request's jobs."""
    return _one_thread("second-half")


def _one_thread(name: str) -> ThreadPoolExecutor:
    """This process's one-thread pool named ``name``, made on first use."""
    key = (os.getpid(), name)
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    return pool


class CallStart(threading.Event):
    """The event a search sets as its model call starts (``budget_search._accept``), and when it was set (``at``,
    ``time.perf_counter``): a helper's job that must end a share of the call's wait after its start reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.at = float("nan")

    def set(self) -> None:
        if not self.is_set():  # the first time: the call's start (set again, as the call ends, it keeps it)
            self.at = time.perf_counter()
        super().set()


def when(go: threading.Event, job: Callable[..., T], *args: Any) -> T:
    """``job(*args)`` once ``go`` is set (the model call has started)."""
    go.wait()
    return job(*args)
