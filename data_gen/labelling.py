"""Label a population with a set-cover solver: chunked, resumable, with a progress bar.

The chunks run through ``data_gen.compute.run_chunks``: each finished chunk is written
atomically to ``<work_dir>/chunk_XXXXX.npz``; a rerun after an interruption loads the finished
chunks and labels only the rest. The fast solver uses both cores itself (numba threads);
per-agent ILP solvers are spread over local processes or a Ray cluster (``compute``).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from data_gen.compute import ChunkResult, ComputeConfig, chunk_bounds, finished_chunks, run_chunks
from envs.capability import CapabilityWorld
from solvers.base import CoverLabels, SetCoverSolver


def _label_chunk(shared: tuple[SetCoverSolver, CapabilityWorld], chunk: tuple) -> ChunkResult:
    solver, world = shared
    X, groups = chunk
    labels = solver.label_batch(world, X, groups)
    return {"cost": labels.cost, "actions": labels.actions, "n_optimal": labels.n_optimal,
            "runtime": labels.runtime}


def concat_labels(parts: list[CoverLabels]) -> CoverLabels:
    if not parts:
        return CoverLabels(np.zeros(0), np.zeros((0, 0), np.int64), np.zeros(0, np.int64), np.zeros(0))
    width = max(p.actions.shape[1] for p in parts)
    pad = [np.pad(p.actions, ((0, 0), (0, width - p.actions.shape[1])), constant_values=-1) for p in parts]
    return CoverLabels(np.concatenate([p.cost for p in parts]), np.concatenate(pad),
                       np.concatenate([p.n_optimal for p in parts]), np.concatenate([p.runtime for p in parts]))


def label_population(world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None, solver: SetCoverSolver,
                     work_dir: str | Path, chunk_size: int = 20_000, n_jobs: int = 1,
                     progress: bool = True, compute: ComputeConfig | None = None) -> tuple[CoverLabels, dict]:
    """Label every agent; returns the labels and timing info (``seconds``, ``resumed_chunks``).

    ``compute`` (default: local, ``n_jobs`` processes) says where the chunks run; its
    ``chunk_size``, when set, overrides ``chunk_size``.
    """
    compute = compute or ComputeConfig(n_workers=n_jobs)
    bounds = chunk_bounds(len(X), compute.chunk_size or chunk_size)
    resumed = len(finished_chunks(work_dir, len(bounds)))
    chunks = [(X[s:e], None if groups is None else groups[s:e]) for s, e in bounds]
    t0 = time.perf_counter()
    parts = run_chunks(_label_chunk, (solver, world), chunks, work_dir, compute=compute,
                       sizes=[e - s for s, e in bounds], desc=f"labelling ({solver.name})", progress=progress)
    labels = concat_labels([CoverLabels(p["cost"], p["actions"], p["n_optimal"], p["runtime"]) for p in parts])
    return labels, {"seconds": time.perf_counter() - t0, "resumed_chunks": resumed, "chunks": len(bounds)}
