"""Label a population with a set-cover solver: chunked, resumable, with a progress bar.

Each finished chunk is written atomically to ``<work_dir>/chunk_XXXXX.npz``; a rerun after an
interruption loads the finished chunks and labels only the rest. The fast solver uses both cores
itself (numba threads); per-agent ILP solvers are spread over ``n_jobs`` processes.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from envs.capability import CapabilityWorld
from solvers.base import CoverLabels, SetCoverSolver


def _chunk_path(work_dir: Path, i: int) -> Path:
    return work_dir / f"chunk_{i:05d}.npz"


def _save_chunk(path: Path, labels: CoverLabels) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, cost=labels.cost, actions=labels.actions, n_optimal=labels.n_optimal, runtime=labels.runtime)
    os.replace(tmp, path)  # atomic: a chunk file is either whole or absent


def _load_chunk(path: Path) -> CoverLabels:
    with np.load(path) as z:
        return CoverLabels(z["cost"], z["actions"], z["n_optimal"], z["runtime"])


def _label_one(args: tuple) -> CoverLabels:
    solver, world, X, groups = args
    return solver.label_batch(world, X, groups)


def concat_labels(parts: list[CoverLabels]) -> CoverLabels:
    width = max(p.actions.shape[1] for p in parts)
    pad = [np.pad(p.actions, ((0, 0), (0, width - p.actions.shape[1])), constant_values=-1) for p in parts]
    return CoverLabels(np.concatenate([p.cost for p in parts]), np.concatenate(pad),
                       np.concatenate([p.n_optimal for p in parts]), np.concatenate([p.runtime for p in parts]))


def label_population(world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None, solver: SetCoverSolver,
                     work_dir: str | Path, chunk_size: int = 20_000, n_jobs: int = 1,
                     progress: bool = True) -> tuple[CoverLabels, dict]:
    """Label every agent; returns the labels and timing info (``seconds``, ``resumed_chunks``)."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    bounds = [(s, min(s + chunk_size, len(X))) for s in range(0, len(X), chunk_size)]
    done = {i for i in range(len(bounds)) if _chunk_path(work_dir, i).exists()}
    todo = [i for i in range(len(bounds)) if i not in done]
    t0 = time.perf_counter()
    bar = tqdm(total=len(X), initial=sum(e - s for i, (s, e) in enumerate(bounds) if i in done),
               desc=f"labelling ({solver.name})", unit="agent", disable=not progress, smoothing=0.1)
    jobs = [(i, (solver, world, X[s:e], None if groups is None else groups[s:e])) for i, (s, e) in
            ((i, bounds[i]) for i in todo)]
    if n_jobs > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=n_jobs) as pool:
            for (i, args), labels in zip(jobs, pool.map(_label_one, [a for _, a in jobs]), strict=True):
                _save_chunk(_chunk_path(work_dir, i), labels)
                bar.update(len(args[2]))
    else:
        for i, args in jobs:
            _save_chunk(_chunk_path(work_dir, i), _label_one(args))
            bar.update(len(args[2]))
    bar.close()
    labels = concat_labels([_load_chunk(_chunk_path(work_dir, i)) for i in range(len(bounds))])
    return labels, {"seconds": time.perf_counter() - t0, "resumed_chunks": len(done), "chunks": len(bounds)}
