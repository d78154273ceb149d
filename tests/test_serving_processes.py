"""serving/processes.py: a fallback pool stopped and multiprocessing's resource tracker ended leave nothing behind,
neither a process nor a semaphore whose finalizer would find it unlinked (an ignored ``FileNotFoundError`` from
``sem_unlink`` at a later garbage collection)."""

from __future__ import annotations

import gc
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor

from serving.processes import stop_pool, stop_resource_tracker, track_pool


def _square(x: int) -> int:
    return x * x


def test_a_stopped_pool_leaves_no_process_and_no_semaphore_to_unlink():
    seen = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        assert pool.submit(_square, 3).result() == 9
        procs = list(pool._processes.values())
        stop_pool(pool)
        del pool  # the server's close() holds it no longer
        stop_resource_tracker()
        gc.collect()  # a later collection: the pool's semaphores were unlinked by their finalizers, not the tracker
    finally:
        sys.unraisablehook = old
    assert not any(p.is_alive() for p in procs)
    assert not [u for u in seen if isinstance(u.exc_value, FileNotFoundError)], [repr(u.exc_value) for u in seen]


def test_the_tracker_outlives_a_pool_while_another_pool_lives():
    """Two services in one process: the first one's close must not end the tracker under the second's pool (it
    would unlink that pool's semaphores under it); the last one's close ends it."""
    from multiprocessing import resource_tracker

    spawn = multiprocessing.get_context("spawn")
    first = track_pool(ProcessPoolExecutor(1, mp_context=spawn))
    second = track_pool(ProcessPoolExecutor(1, mp_context=spawn))
    assert first.submit(_square, 2).result() == 4 and second.submit(_square, 3).result() == 9
    stop_pool(first)
    del first
    stop_resource_tracker()
    tracker = resource_tracker._resource_tracker
    assert tracker._pid is not None  # still running: the second pool lives
    assert second.submit(_square, 4).result() == 16  # and still answers
    stop_pool(second)
    del second
    stop_resource_tracker()
    assert tracker._pid is None  # the last pool gone: ended
