"""Sequence labels: rejected agents of a sequential world labelled by the sequencer.

``label_sequences`` runs a sequential solver (default: the BRKGA sequencer) on every agent,
chunked through :func:`data_gen.compute.run_chunks` (both cores by default; each finished chunk
written atomically, a rerun resumes; a progress bar). The result, a :class:`SequenceLabelSet`,
holds per agent the cheapest sequence (padded action ids and values), its cost, Gower distance,
the front size and the runtime, and every member of every Pareto front; it saves as Parquet
(``agents.parquet``, ``fronts.parquet``) plus ``manifest.json`` (config, world fingerprint,
sizes, statistics, content hash; written last) and ``world.json``.

``build_sequence_dataset`` is the reproducible entry point: the same config reuses the stored
dataset, a changed config gets a new directory. ``python -m data_gen.sequence_labels`` runs it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from data_gen.compute import ChunkResult, ComputeConfig, chunk_bounds, run_chunks
from data_gen.dataset import fixed_size_column
from data_gen.sequential_worlds import DEFAULT_CACHE, build_sequential, rejected_agents
from envs.sequential import SequentialWorld
from solvers.sequential import BRKGASequencer

MANIFEST = "manifest.json"
STATUS = ("ok", "no_recourse", "unknown", "already_accepted")


@dataclass
class SequenceLabelSet:
    """The solver's answer for each agent; ``front_*`` rows are all front members, by ``front_agent``."""

    X: np.ndarray  # (N, D) encoded agents
    status: np.ndarray  # (N,) one of STATUS
    cost: np.ndarray  # (N,) cost of the cheapest sequence (inf where none)
    actions: np.ndarray  # (N, L) its action ids in order, -1 padded
    values: np.ndarray  # (N, L) its values in raw units (NaN: none / assign action)
    gower: np.ndarray  # (N,) Gower distance of its counterfactual (NaN where none)
    front_size: np.ndarray  # (N,) members of the agent's Pareto front
    runtime: np.ndarray  # (N,) seconds per agent
    front_agent: np.ndarray  # (M,) agent row of each front member
    front_actions: np.ndarray  # (M, L)
    front_values: np.ndarray  # (M, L)
    front_cost: np.ndarray  # (M,)
    front_gower: np.ndarray  # (M,)
    action_names: list[str]
    cpu_runtime: np.ndarray | None = None  # (N,) CPU seconds per agent (wall time inflates on a busy machine)

    def __len__(self) -> int:
        return len(self.X)

    @property
    def ok(self) -> np.ndarray:
        return self.status == "ok"

    @property
    def length(self) -> np.ndarray:
        return (self.actions >= 0).sum(axis=1)

    def steps(self, i: int) -> list[tuple[str, Any]]:
        """The cheapest sequence of agent ``i`` as ``(action name, value)`` steps."""
        return [(self.action_names[a], None if np.isnan(v) else float(v))
                for a, v in zip(self.actions[i], self.values[i], strict=True) if a >= 0]

    def summary(self) -> dict[str, Any]:
        ok = self.ok
        lengths = self.length[ok]
        return {
            "agents": int(len(self)),
            **{f"n_{s}": int((self.status == s).sum()) for s in STATUS},
            "success_rate": float(ok.mean()) if len(self) else None,
            "mean_cost": float(self.cost[ok].mean()) if ok.any() else None,
            "median_front_size": float(np.median(self.front_size[ok])) if ok.any() else None,
            "length_mix": {int(k): int(v) for k, v in zip(*np.unique(lengths, return_counts=True), strict=True)},
            "mean_seconds": float(self.runtime.mean()) if len(self) else None,
            "mean_cpu_seconds": float(self.cpu_runtime.mean()) if self.cpu_runtime is not None and len(self) else None,
        }

    def content_hash(self) -> str:
        """SHA-256 of the deterministic columns (runtimes excluded: they differ between runs)."""
        h = hashlib.sha256()
        for a in (self.X, self.cost, self.actions, self.values, self.gower, self.front_size, self.front_agent,
                  self.front_actions, self.front_values, self.front_cost, self.front_gower):
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        h.update("\n".join(map(str, self.status)).encode())
        return h.hexdigest()

    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> None:
        """``agents.parquet`` + ``fronts.parquet`` + ``manifest.json`` (written last)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        D, L = self.X.shape[1], self.actions.shape[1]
        fixed = lambda a, n: pa.FixedSizeListArray.from_arrays(pa.array(np.asarray(a).reshape(-1)), n)  # noqa: E731
        pq.write_table(pa.table({
            "x": fixed(self.X, D), "status": pa.array(self.status.astype(str)).dictionary_encode(),
            "cost": pa.array(self.cost), "actions": fixed(self.actions, L), "values": fixed(self.values, L),
            "gower": pa.array(self.gower), "front_size": pa.array(self.front_size), "runtime": pa.array(self.runtime),
            **({} if self.cpu_runtime is None else {"cpu_runtime": pa.array(self.cpu_runtime)}),
        }), path / "agents.parquet", compression="zstd")
        pq.write_table(pa.table({
            "agent": pa.array(self.front_agent), "actions": fixed(self.front_actions, L),
            "values": fixed(self.front_values, L), "cost": pa.array(self.front_cost),
            "gower": pa.array(self.front_gower),
        }), path / "fronts.parquet", compression="zstd")
        manifest = {"action_names": self.action_names, "summary": self.summary(),
                    "content_hash": self.content_hash(), **(meta or {})}
        (path / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))

    @classmethod
    def load(cls, path: str | Path) -> SequenceLabelSet:
        path = Path(path)
        if not (path / MANIFEST).exists():
            raise FileNotFoundError(f"labels: no {MANIFEST} in {path} (unfinished or not a sequence dataset)")
        manifest = json.loads((path / MANIFEST).read_text())
        a, f = pq.read_table(path / "agents.parquet"), pq.read_table(path / "fronts.parquet")
        col = lambda t, c: t.column(c).to_numpy()  # noqa: E731
        out = cls(fixed_size_column(a, "x"), np.asarray(a.column("status").to_pylist()), col(a, "cost"),
                  fixed_size_column(a, "actions").astype(np.int64), fixed_size_column(a, "values"), col(a, "gower"),
                  col(a, "front_size"), col(a, "runtime"), col(f, "agent"),
                  fixed_size_column(f, "actions").astype(np.int64), fixed_size_column(f, "values"), col(f, "cost"),
                  col(f, "gower"), manifest["action_names"],
                  col(a, "cpu_runtime") if "cpu_runtime" in a.column_names else None)
        if out.content_hash() != manifest["content_hash"]:
            raise ValueError(f"labels: content of {path} does not match its manifest's hash (edited or corrupted)")
        return out


def _pad(steps: list[tuple[int, float]], L: int) -> tuple[np.ndarray, np.ndarray]:
    acts, vals = np.full(L, -1, np.int64), np.full(L, np.nan)
    for t, (a, v) in enumerate(steps):
        acts[t], vals[t] = a, v
    return acts, vals


def _label_chunk(shared: tuple[Any, SequentialWorld], X: np.ndarray) -> ChunkResult:
    """Solve each agent of a chunk (module level: it is sent to worker processes)."""
    solver, world = shared
    N, L = len(X), world.n_actions
    out: dict[str, Any] = {"status": np.empty(N, dtype="<U16"), "cost": np.full(N, np.inf),
                           "actions": np.full((N, L), -1, np.int64), "values": np.full((N, L), np.nan),
                           "gower": np.full(N, np.nan), "front_size": np.zeros(N, np.int64), "runtime": np.zeros(N),
                           "cpu_runtime": np.zeros(N)}
    front: list[tuple[int, np.ndarray, np.ndarray, float, float]] = []
    for i, x in enumerate(X):
        t0, c0 = time.perf_counter(), time.process_time()
        answer = solver.solve(world, x)
        out["runtime"][i], out["cpu_runtime"][i] = time.perf_counter() - t0, time.process_time() - c0
        best = answer[0]
        out["status"][i] = "already_accepted" if best.extra.get("already_accepted") else best.status
        if not best.found:
            continue
        members = [r for r in answer if r.found]
        out["front_size"][i] = len(members)
        for r in members:
            acts, vals = _pad([(a, np.nan if v is None else v) for a, (_, v) in zip(r.action_ids, r.steps, strict=True)], L)
            front.append((i, acts, vals, r.cost, r.extra["gower"]))
        out["actions"][i], out["values"][i] = front[-len(members)][1], front[-len(members)][2]
        out["cost"][i], out["gower"][i] = best.cost, best.extra["gower"]
    out["front_agent"] = np.array([f[0] for f in front], np.int64)
    out["front_actions"] = np.array([f[1] for f in front], np.int64).reshape(-1, L)
    out["front_values"] = np.array([f[2] for f in front], float).reshape(-1, L)
    out["front_cost"] = np.array([f[3] for f in front], float)
    out["front_gower"] = np.array([f[4] for f in front], float)
    return out


def label_sequences(world: SequentialWorld, X: np.ndarray, work_dir: str | Path, solver: Any = None, *,
                    chunk_size: int = 10, n_jobs: int = 2, progress: bool = True,
                    compute: ComputeConfig | None = None) -> SequenceLabelSet:
    """Run ``solver`` (default: ``BRKGASequencer()``) on every agent of ``X``; resumable from
    ``work_dir/chunk_*.npz``. ``compute`` (default: local, ``n_jobs`` processes) says where the
    chunks run; its ``chunk_size``, when set, overrides ``chunk_size``."""
    X = world.validate(X, name="X")
    solver = solver or BRKGASequencer()
    compute = compute or ComputeConfig(n_workers=n_jobs)
    bounds = chunk_bounds(len(X), compute.chunk_size or chunk_size)
    parts = run_chunks(_label_chunk, (solver, world), [X[s:e] for s, e in bounds], work_dir, compute=compute,
                       sizes=[e - s for s, e in bounds], desc=f"sequence labels ({world.name}, {solver.name})",
                       progress=progress)
    L = world.n_actions
    cat = lambda k, empty: np.concatenate([p[k] for p in parts]) if parts else empty  # noqa: E731
    agent = [p["front_agent"] + s for p, (s, _) in zip(parts, bounds, strict=True)]
    return SequenceLabelSet(
        X, cat("status", np.zeros(0, "<U16")).astype(str), cat("cost", np.zeros(0)),
        cat("actions", np.zeros((0, L), np.int64)), cat("values", np.zeros((0, L))), cat("gower", np.zeros(0)),
        cat("front_size", np.zeros(0, np.int64)), cat("runtime", np.zeros(0)),
        np.concatenate(agent) if agent else np.zeros(0, np.int64), cat("front_actions", np.zeros((0, L), np.int64)),
        cat("front_values", np.zeros((0, L))), cat("front_cost", np.zeros(0)), cat("front_gower", np.zeros(0)),
        world.action_names, np.concatenate([p.get("cpu_runtime", np.full(len(p["cost"]), np.nan)) for p in parts])
        if parts else np.zeros(0))  # chunks written before CPU time was recorded: NaN


def build_sequence_dataset(world: str = "adult", *, n_agents: int = 100, split: str = "test", seed: int = 0,
                           discounts: bool = True, solver_params: dict[str, Any] | None = None,
                           root: str | Path = "data_cache/sequence_labels", cache_dir: str | Path = DEFAULT_CACHE,
                           n_jobs: int = 2, chunk_size: int = 10, progress: bool = True
                           ) -> tuple[SequenceLabelSet, Path]:
    """Label ``n_agents`` rejected agents (seeded draw from ``split``) of a sequential world with the
    BRKGA sequencer (``solver_params`` override its defaults); reused when the config is unchanged."""
    solver = BRKGASequencer(**(solver_params or {}))
    built = build_sequential(world, discounts=discounts, seed=0, cache_dir=cache_dir)
    config = {"world": world, "discounts": discounts, "n_agents": n_agents, "split": split, "seed": seed,
              "solver": solver.name, "solver_params": solver.get_params(), "world_fingerprint": built.world.fingerprint()}
    key = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]
    path = Path(root) / f"{built.world.name.replace('/', '-')}-{key}"
    if (path / MANIFEST).exists() and json.loads((path / MANIFEST).read_text()).get("config") == json.loads(
            json.dumps(config, default=str)):
        return SequenceLabelSet.load(path), path
    X = rejected_agents(built, n_agents, seed=seed, split=split)
    t0 = time.perf_counter()
    labels = label_sequences(built.world, X, path / "chunks", solver, chunk_size=chunk_size, n_jobs=n_jobs,
                             progress=progress)
    built.world.save(path / "world.json")
    labels.save(path, {"config": config, "seconds": time.perf_counter() - t0,
                       "black_box": {k: built.metrics.get(k) for k in ("train_accuracy", "test_accuracy")}})
    return labels, path


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Label rejected agents of a sequential world with the BRKGA sequencer.")
    ap.add_argument("--world", default="adult", choices=["adult", "german"])
    ap.add_argument("--scf", action="store_true", help="no discounts (CSCF's scf variant)")
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--split", default="test", choices=["test", "all"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--generations", type=int, default=150)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--root", default="data_cache/sequence_labels")
    args = ap.parse_args(argv)
    labels, path = build_sequence_dataset(args.world, n_agents=args.agents, split=args.split, seed=args.seed,
                                          discounts=not args.scf, solver_params={"n_generations": args.generations},
                                          root=args.root, n_jobs=args.jobs)
    print(json.dumps({"path": str(path), **labels.summary()}, indent=1))


if __name__ == "__main__":
    main()
