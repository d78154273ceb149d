"""Small requests first: batch and job chunks answered in a process of their own (issue 57 item 3).

A batch chunk answered in the server's process holds its GIL for long stretches (the generator's
compiled kernels, numpy glue), and a single request that arrives meanwhile waits: during a
10,000-record batch, single requests reached p99 53-81 ms. :class:`BatchWorker` moves the chunks
to one spawned child process that loads the same run (``TabularService`` from the run directory, its
fallback chain in place) at a lower priority (nice 5); the server's process only parses, counts and
serializes. A single request then competes with a batch for a core, never for the GIL.

The child answers exactly what the server's process would (the same run files, the same code);
``serving/jobs.py`` calls :meth:`BatchWorker.recommend` where it called ``svc.recommend``. A child that
died is started again once per call; past that the chunk is answered in the server's process, so a
batch never fails for the worker's sake.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from serving.processes import stop_pool, track_pool

log = logging.getLogger("recourse_gym.serve")

BATCH_NICE = 5  # below the server's requests, above the fallback process (serving.tabular.FALLBACK_NICE)

_CHILD: dict[str, Any] = {}


def _init(args: tuple, kwargs: dict[str, Any]) -> None:
    from serving.processes import exit_with_parent

    exit_with_parent()  # a server killed with SIGKILL leaves no worker behind
    try:
        os.setpriority(os.PRIO_PROCESS, 0, max(BATCH_NICE, os.getpriority(os.PRIO_PROCESS, 0)))
    except (AttributeError, OSError):
        pass
    from serving.startup import warm_up_tabular
    from serving.tabular import TabularService

    _CHILD["svc"] = TabularService(*args, **kwargs)
    try:  # the child's kernels compiled (or loaded from numba's cache) before its first chunk, not in it
        warm_up_tabular(_CHILD["svc"])
    except Exception as err:  # noqa: BLE001 (a failed warm-up only makes the first chunk slower)
        log.warning("batch worker: warm-up failed (%s); the first chunk compiles", err)


def _recommend(X: np.ndarray, n_diverse: int) -> list[Any]:
    return _CHILD["svc"].recommend(X, n_diverse)


class BatchWorker:
    """One child process answering batch chunks of a tabular run (see the module)."""

    def __init__(self, run_dir: str, model: str | None, fallback_budget_s: float | None, max_batch: int,
                 max_diverse: int, model_latency_s: float = 0.0):
        self._args = (str(run_dir), model, fallback_budget_s, max_batch, max_diverse)
        self._kwargs = {"model_latency_s": float(model_latency_s)}  # the same remote model as the server's
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self.restarts = 0
        self._closed = False

    def _ensure(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("batch worker: closed")
            if self._pool is None:
                import multiprocessing

                self._pool = track_pool(ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                            initializer=_init, initargs=(self._args, self._kwargs)))
            return self._pool

    def start(self) -> Any:
        """Start the child and let it load the run and warm up its kernels now, in the background; the
        returned future completes when it has (the server is ready only then: a batch's first chunk
        would otherwise compile them, 10 s and more on a busy machine)."""
        return self._ensure().submit(os.getpid)

    def recommend(self, X: np.ndarray, n_diverse: int = 0, fallback: Any = None) -> list[Any]:
        """The run's answers for ``X`` from the child; ``fallback(X, n_diverse)`` answers in this process
        if the child cannot (it died twice, or the worker is closed)."""
        for _ in range(2):
            try:
                return self._ensure().submit(_recommend, np.asarray(X, float), int(n_diverse)).result()
            except BrokenProcessPool:
                with self._lock:
                    pool, self._pool = self._pool, None
                    self.restarts += 1
                if pool is not None:
                    pool.shutdown(wait=False, cancel_futures=True)
                log.warning("batch worker died; starting it again")
            except RuntimeError:
                break
        if fallback is None:
            raise RuntimeError("batch worker: unavailable")
        return fallback(X, n_diverse)

    def close(self) -> None:
        """Stop the child (the app's shutdown)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            stop_pool(pool, timeout_s=0.5)  # SIGTERM, reaped (and forgotten by the tracker's guard)
