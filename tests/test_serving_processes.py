"""serving/processes.py: multiprocessing's resource tracker outlives a stopped pool while another pool lives, and
ends with the last; a stopped pool's semaphores are unlinked once, when it stops. Each test runs in a fresh
interpreter: a test worker's other pools would keep the tracker alive."""

from __future__ import annotations

import subprocess
import sys
import textwrap

HEAD = """
import gc, multiprocessing, sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import resource_tracker
from serving.processes import release_semaphores, stop_pool, stop_resource_tracker, track_pool
seen = []
sys.unraisablehook = seen.append
spawn = multiprocessing.get_context("spawn")
"""


def _run(body: str) -> str:
    script = HEAD + textwrap.dedent(body) + "\nprint('UNRAISABLE', [repr(u.exc_value) for u in seen])\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_the_tracker_outlives_a_pool_while_another_pool_lives():
    """Two services in one process: the first one's close must not end the tracker under the second's pool (it
    would unlink that pool's semaphores under it); the last one's close ends it."""
    out = _run("""
        first = track_pool(ProcessPoolExecutor(1, mp_context=spawn))
        second = track_pool(ProcessPoolExecutor(1, mp_context=spawn))
        assert first.submit(abs, -2).result() == 2 and second.submit(abs, -3).result() == 3
        stop_pool(first)
        del first
        stop_resource_tracker()
        tracker = resource_tracker._resource_tracker
        print('AFTER FIRST', tracker._pid is not None)  # still running: the second pool lives
        assert second.submit(abs, -4).result() == 4  # and still answers
        stop_pool(second)
        del second
        stop_resource_tracker()
        print('AFTER LAST', tracker._pid is None)
    """)
    assert "AFTER FIRST True" in out and "AFTER LAST True" in out, out


def test_a_stopped_pools_semaphores_are_unlinked_once_when_it_stops():
    """A caller still holding a stopped pool when the tracker ends (the tracker unlinks what is still registered)
    must see no ``FileNotFoundError`` from ``sem_unlink`` when the pool is collected later: ``stop_pool`` unlinks
    and unregisters its queues' five semaphores itself (before it did, this raised on every run)."""
    out = _run("""
        pool = track_pool(ProcessPoolExecutor(1, mp_context=spawn))
        assert pool.submit(abs, -2).result() == 2
        queues = [pool._call_queue, pool._result_queue]
        names = [lock._semlock.name for q in queues for lock in (q._rlock, q._wlock, getattr(q, "_sem", None)) if lock]
        stop_pool(pool)
        print('AGAIN', release_semaphores(queues))  # each finalizer runs once
        kept = pool
        stop_resource_tracker()
        print('ENDED', resource_tracker._resource_tracker._pid is None)
        del kept, pool, queues
        gc.collect()
        print('NAMES', len(names))
    """)
    assert "AGAIN 0" in out and "ENDED True" in out and "NAMES 5" in out, out
    assert "UNRAISABLE []" in out, out
