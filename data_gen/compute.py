"""Run a labelling job as resumable chunks, on local processes or on a Ray cluster.

Every labeller (set cover, MACE, the sequencer) and the batch recommender has the same shape
of work: split the agents into chunks, run a pure function on each chunk, keep the results.
``run_chunks`` does that once for all of them:

- a chunk's result (a dict of arrays) is written to ``<work_dir>/chunk_XXXXX.npz`` atomically
  (temporary file, then ``os.replace``): a chunk file is whole or absent, never half-written;
- a rerun (after a crash, a kill or Ctrl-C of the driver) loads the finished chunks and runs
  only the others, so nothing is lost or counted twice;
- ``backend="local"`` runs chunks in this process (``n_workers=1``) or in a process pool;
  ``backend="ray"`` makes each chunk a Ray task (``ray`` extra). Ray retries a task whose
  worker died (``max_retries``); the driver writes the chunk files, so on a multi-node cluster
  the results land on the driver's disk;
- results do not depend on the backend: the same chunks in the same order, with the same
  deterministic function, give byte-identical data (a test checks it for each labeller).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from data_gen.progress import progress_bar
from envs.optional import require

ChunkResult = dict[str, np.ndarray]
ChunkTask = Callable[[Any, Any], ChunkResult]


class ComputeConfig(BaseModel):
    """Where a chunked job runs (the ``compute:`` block of a dataset, labelling or batch config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["local", "ray"] = Field("local", description="local processes, or one Ray task per chunk")
    address: str | None = Field(None, description="Ray: None starts a local instance; 'auto' joins the running "
                                                  "cluster; 'ray://host:port' a remote one")
    n_workers: int = Field(1, ge=1, description="local: worker processes (1 = in this process); "
                                                "ray with address None: CPUs of the local instance")
    chunk_size: int | None = Field(None, ge=1, description="agents per chunk (None: the labeller's default)")
    max_retries: int = Field(3, ge=0, description="Ray: reruns of a chunk whose worker died")


def chunk_bounds(n: int, chunk_size: int) -> list[tuple[int, int]]:
    """``[start, end)`` row ranges of ``n`` rows in chunks of ``chunk_size``."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size: must be >= 1, got {chunk_size}")
    return [(s, min(s + chunk_size, n)) for s in range(0, n, chunk_size)]


def chunk_path(work_dir: Path, i: int) -> Path:
    return work_dir / f"chunk_{i:05d}.npz"


def save_chunk(path: Path, result: ChunkResult) -> None:
    """Write a chunk's arrays atomically: the file is whole or absent, and an interrupted write (Ctrl-C
    mid-``savez``) leaves no temporary file behind."""
    tmp = path.with_name(f"{path.stem}.tmp{os.getpid()}.npz")
    try:
        np.savez(tmp, **result)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_chunk(path: Path) -> ChunkResult:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def finished_chunks(work_dir: str | Path, n_chunks: int) -> list[int]:
    """Indices of the chunks already written to ``work_dir``."""
    return [i for i in range(n_chunks) if chunk_path(Path(work_dir), i).exists()]


def run_chunks(task: ChunkTask, shared: Any, chunks: Sequence[Any], work_dir: str | Path, *,
               compute: ComputeConfig | None = None, sizes: Sequence[int] | None = None,
               desc: str = "chunks", unit: str = "agent", progress: bool = True,
               keep_results: bool = True) -> list[ChunkResult]:
    """Run ``task(shared, chunk)`` on every chunk not yet in ``work_dir``; return all results in order.

    ``keep_results=False`` returns nothing: the caller streams the chunk files itself (results
    larger than memory).

    ``task`` must be a module-level function (it is pickled to the workers) and deterministic;
    ``shared`` (the world and the solver) is sent to each worker once. ``sizes`` (rows per
    chunk) drive the progress bar, which counts finished chunks' rows on the driver.
    """
    compute = compute or ComputeConfig()
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    sizes = list(sizes) if sizes is not None else [1] * len(chunks)
    if len(sizes) != len(chunks):
        raise ValueError(f"sizes: {len(sizes)} sizes for {len(chunks)} chunks")
    done = set(finished_chunks(work_dir, len(chunks)))
    todo = [i for i in range(len(chunks)) if i not in done]
    bar = progress_bar(total=sum(sizes), initial=sum(sizes[i] for i in done), desc=desc, unit=unit,
                       enabled=progress, smoothing=0.1)

    def finish(i: int, result: ChunkResult) -> None:
        save_chunk(chunk_path(work_dir, i), result)
        bar.update(sizes[i])

    try:
        if not todo:
            pass
        elif compute.backend == "ray":
            _run_ray(task, shared, chunks, todo, compute, finish)
        elif compute.n_workers > 1 and len(todo) > 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=compute.n_workers) as pool:
                for i, result in zip(todo, pool.map(task, [shared] * len(todo), [chunks[i] for i in todo]),
                                     strict=True):
                    finish(i, result)
        else:
            for i in todo:
                finish(i, task(shared, chunks[i]))
    finally:
        bar.close()
    if not keep_results:
        return []
    return [load_chunk(chunk_path(work_dir, i)) for i in range(len(chunks))]


def ray_init(compute: ComputeConfig) -> Any:
    """Connect to (or start) the Ray cluster of ``compute``; return the ``ray`` module."""
    ray = require("ray", "compute.backend: 'ray'")
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if compute.address is None:
            kwargs["num_cpus"] = compute.n_workers
        ray_environment(local=compute.address is None)
        ray.init(address=compute.address, **kwargs)
    return ray


def ray_environment(*, local: bool) -> None:
    """Set what Ray reads from the environment before ``ray.init``, where the caller has not set it:
    - ``RAY_TQDM_PATCH_PRINT=0``: else Ray replaces ``builtins.print`` in this process the first time it prints
      a message of its own here (a worker's death, its workers' logs) and never puts it back, and numba cannot
      compile a function that uses ``print`` afterwards (its own ``get_num_threads`` does: the first call of any
      parallel kernel not compiled yet failed);
    - ``RAY_worker_niceness=0`` for a ``local`` instance: Ray starts its workers at nice 15, and the local
      instance's workers are this job's work, so they run at the caller's priority (a batch on Ray beside a busy
      core: 24 -> 125 s at nice 15)."""
    os.environ.setdefault("RAY_TQDM_PATCH_PRINT", "0")
    if local:
        os.environ.setdefault("RAY_worker_niceness", "0")


def _run_ray(task: ChunkTask, shared: Any, chunks: Sequence[Any], todo: list[int], compute: ComputeConfig,
             finish: Callable[[int, ChunkResult], None]) -> None:
    """One Ray task per chunk, at most twice the cluster's CPUs in flight; results saved as they land."""
    ray = ray_init(compute)
    remote = ray.remote(max_retries=compute.max_retries)(task)
    shared_ref = ray.put(shared)  # sent to each node once, not with every chunk
    window = 2 * max(1, int(ray.cluster_resources().get("CPU", 1)))
    pending: dict[Any, int] = {}
    queue = list(todo)
    try:
        while queue or pending:
            while queue and len(pending) < window:
                i = queue.pop(0)
                pending[remote.remote(shared_ref, chunks[i])] = i
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                finish(pending.pop(ref), ray.get(ref))
    finally:
        for ref in pending:  # an interrupted driver leaves no orphan work behind
            ray.cancel(ref, force=True)
