"""The fallback's processes and threads: their priority and a clean stop.

A tabular server solves its fallbacks (GeCo, MACE) on a worker thread and, where it can, in one
child process, both at a lower OS priority so that generator answers go first when they compete
for a core. On shutdown the child gets SIGTERM, then SIGKILL, and is reaped, and multiprocessing's
resource tracker is ended too, so that no process outlives the server.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

FALLBACK_NICE = 10  # the fallback thread's niceness: generator answers go first when they compete for a core
PROCESS_STOP_S = 3.0  # a shutdown waits this long for the fallback process to end after SIGTERM, then kills it
_LIVE_POOLS: weakref.WeakSet[Any] = weakref.WeakSet()  # spawned pools whose semaphores the resource tracker holds


def track_pool(pool: Any) -> Any:
    """``pool``, remembered until :func:`stop_pool` (or its collection): while one lives, the resource tracker
    is not ended (it would unlink that pool's semaphores, and a worker it starts again opens them by name)."""
    _LIVE_POOLS.add(pool)
    return pool


def lower_priority() -> None:
    """Run the fallback thread at a lower OS priority (Linux schedules threads; elsewhere a no-op)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), FALLBACK_NICE)
    except (AttributeError, OSError):
        pass


def stop_pool(pool: Any, timeout_s: float = PROCESS_STOP_S) -> None:
    """Stop a process pool now: cancel its queue, SIGTERM its processes, SIGKILL those still alive after
    ``timeout_s``, and reap them (so that the multiprocessing resource tracker, which lives as long as a
    process holds its pipe, ends too)."""
    if pool is None:
        return
    queues = [getattr(pool, name, None) for name in ("_call_queue", "_result_queue")]  # shutdown drops them
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)
    pool.shutdown(wait=False, cancel_futures=True)
    manager = getattr(pool, "_executor_manager_thread", None)  # it holds the pool's queues until it sees the end
    if manager is not None:
        manager.join(max(0.1, deadline - time.monotonic()))
    release_semaphores(queues)
    _LIVE_POOLS.discard(pool)


def release_semaphores(queues: list[Any]) -> int:
    """Unlink the named semaphores of a stopped pool's ``queues`` now, by running their own finalizers (each runs
    once: the collection of the lock later finds it done), and forget them in the resource tracker. Left to the
    collector, a semaphore freed after the tracker has ended (which unlinks what is still registered) would be
    unlinked twice, and ``sem_unlink`` would raise an ignored ``FileNotFoundError``. Returns how many it released."""
    from multiprocessing import synchronize, util

    locks = {id(lock) for q in queues if q is not None for name in ("_rlock", "_wlock", "_sem")
             if isinstance(lock := getattr(q, name, None), synchronize.SemLock)}
    cleanup = getattr(synchronize.SemLock, "_cleanup", None)
    if cleanup is None:  # (private API: another Python may not have it; then the collector does it, as before)
        return 0
    done = 0
    for finalizer in list(getattr(util, "_finalizer_registry", {}).values()):
        ref = getattr(finalizer, "_weakref", None)
        if ref is not None and id(ref()) in locks and getattr(finalizer, "_callback", None) is cleanup:
            finalizer()
            done += 1
    return done


def stop_resource_tracker(timeout_s: float = 2.0) -> None:
    """End multiprocessing's resource tracker process (started with the fallback process; it ignores
    SIGTERM and SIGINT and ends only when its pipe closes): close the pipe and reap it, waiting at most
    ``timeout_s`` (on a daemon thread, so a tracker that does not end cannot hold the shutdown). Garbage is
    collected first, so that spawned objects no longer held (not only the pools :func:`stop_pool` has released,
    :func:`release_semaphores`) unlink their semaphores while the tracker runs. Nothing is ended while another
    tracked pool lives (another service of this process)."""
    import gc
    from multiprocessing import resource_tracker

    gc.collect()
    if len(_LIVE_POOLS):
        return
    tracker = resource_tracker._resource_tracker
    if getattr(tracker, "_pid", None) is None:
        return
    stopper = threading.Thread(target=tracker._stop, name="stop-resource-tracker", daemon=True)
    stopper.start()
    stopper.join(timeout_s)


def exit_with_parent(poll_s: float = 1.0) -> None:
    """In a child process: exit when the process that started it is gone (a server killed with SIGKILL
    runs no shutdown, and a pool's worker holds both ends of its own queue's pipe, so it would never
    see the end of its input and would wait forever). A daemon thread polls the parent's pid."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
