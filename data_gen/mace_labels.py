"""MACE labels over a population of a tabular world, and their encodings for the learners.

``label_tabular`` runs MACE on every agent (negatively classified rows), spread over worker
processes, in chunks written atomically as they finish (a rerun resumes), with a progress bar.
``MaceLabelSet`` holds the results; ``MaceLabelSet.encodings`` gives the three encodings of
the learning-CFE paper on real-data labels:

- named-action: which raw features change, as named actions ``change_<feature>`` (multi-hot);
- full-action: the changes themselves (the counterfactual's encoded row minus the agent's);
- named CFE: one class per distinct set of changed features.

``to_split`` turns labels into a :class:`~data_gen.dataset.Split` (states scaled to [0, 1] by
the schema's bounds), so the named-action and named-CFE generators train on them unchanged.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from data_gen.compute import ChunkResult, ComputeConfig, chunk_bounds, run_chunks
from data_gen.dataset import Split, fixed_size_column
from data_gen.encodings import CfeVocabulary
from envs.schema import FeatureSchema
from envs.tabular import TabularWorld
from solvers.mace.distance import distance_features

STATUS = ("ok", "no_recourse", "unknown", "already_positive")


def raw_feature_index(schema: FeatureSchema) -> tuple[list[str], np.ndarray]:
    """Raw feature names (a one-hot group is one feature, as in MACE's distance) and each column's."""
    raws = distance_features(schema)
    of_column = np.empty(len(schema), dtype=np.int64)
    for j, r in enumerate(raws):
        of_column[list(r.columns)] = j
    return [r.name for r in raws], of_column


def scale_states(schema: FeatureSchema, X: np.ndarray) -> np.ndarray:
    """Encoded rows scaled to [0, 1] by the schema's bounds (the generators' input)."""
    lo, hi = schema.bounds()
    span = np.where(hi > lo, hi - lo, 1.0)
    return ((np.asarray(X, float) - lo) / span).astype(np.float32)


@dataclass
class MaceLabelSet:
    """MACE's answer for each agent of a population."""

    X: np.ndarray  # (N, D) encoded agents
    cf: np.ndarray  # (N, D) encoded counterfactuals (NaN where none)
    distance: np.ndarray  # (N,) normalized distance (inf where none)
    delta_min: np.ndarray  # (N,) certified lower bound on the optimal distance
    status: np.ndarray  # (N,) one of STATUS
    runtime: np.ndarray  # (N,) seconds per agent
    feature_names: list[str]  # raw features (a one-hot group is one)
    column_feature: np.ndarray  # (D,) raw feature of each encoded column

    def __len__(self) -> int:
        return len(self.X)

    @property
    def ok(self) -> np.ndarray:
        return self.status == "ok"

    def changed(self, tol: float = 1e-9) -> np.ndarray:
        """(N, J) bool: which raw features the counterfactual changes."""
        delta = np.abs(np.nan_to_num(self.cf - self.X, nan=0.0)) > tol
        out = np.zeros((len(self), len(self.feature_names)), dtype=bool)
        for j in range(len(self.feature_names)):
            out[:, j] = delta[:, self.column_feature == j].any(axis=1)
        return out

    def sets(self) -> np.ndarray:
        """Changed raw features as padded ascending id rows (the named-action CFE), -1 padded."""
        changed = self.changed()
        width = max(1, int(changed.sum(1).max(initial=0)))
        ids = np.where(changed, np.arange(changed.shape[1]), np.iinfo(np.int64).max)
        ids = np.sort(ids, axis=1)[:, :width]
        return np.where(ids == np.iinfo(np.int64).max, -1, ids)

    @property
    def action_names(self) -> list[str]:
        return [f"change_{f}" for f in self.feature_names]

    def encodings(self) -> dict[str, Any]:
        """The three learner encodings of the solved agents (status ``ok``)."""
        ok = self.ok
        sets = self.sets()[ok]
        vocab = CfeVocabulary(sets, self.action_names)
        return {
            "named_action": self.changed()[ok].astype(np.uint8),
            "full_action": (self.cf - self.X)[ok],
            "named_cfe": vocab.encode(sets),
            "vocabulary": vocab.names_,
        }

    def to_split(self, schema: FeatureSchema, idx: np.ndarray | None = None, vocab: CfeVocabulary | None = None
                 ) -> tuple[Split, CfeVocabulary]:
        """A learner split of the solved agents (optionally a subset ``idx`` of them)."""
        ok = np.flatnonzero(self.ok)
        rows = ok if idx is None else ok[idx]
        sets = self.sets()[rows]
        vocab = vocab or CfeVocabulary(sets, self.action_names)
        split = Split(X=scale_states(schema, self.X[rows]), groups=np.zeros(len(rows), np.int64), sets=sets,
                      cost=self.distance[rows], class_ids=vocab.encode(sets), runtime=self.runtime[rows])
        return split, vocab

    def summary(self) -> dict[str, Any]:
        ok = self.ok
        changed = self.changed()[ok].sum(1)
        return {
            "agents": int(len(self)),
            **{f"n_{s}": int((self.status == s).sum()) for s in STATUS},
            "mean_distance": float(self.distance[ok].mean()) if ok.any() else None,
            "mean_seconds": float(self.runtime.mean()) if len(self) else None,
            "mean_features_changed": float(changed.mean()) if ok.any() else None,
            "distinct_cfes": int(len(np.unique(self.sets()[ok], axis=0))) if ok.any() else 0,
        }

    def save(self, path: str | Path, meta: dict[str, Any] | None = None) -> None:
        """Parquet table + JSON manifest (written last)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        D = self.X.shape[1]
        table = pa.table({
            "x": pa.FixedSizeListArray.from_arrays(pa.array(self.X.reshape(-1)), D),
            "cf": pa.FixedSizeListArray.from_arrays(pa.array(self.cf.reshape(-1)), D),
            "distance": pa.array(self.distance), "delta_min": pa.array(self.delta_min),
            "status": pa.array(self.status.astype(str)).dictionary_encode(), "runtime": pa.array(self.runtime),
        })
        pq.write_table(table, path / "labels.parquet", compression="zstd")
        manifest = {"feature_names": self.feature_names, "column_feature": self.column_feature.tolist(),
                    "summary": self.summary(), **(meta or {})}
        (path / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))

    @classmethod
    def load(cls, path: str | Path) -> MaceLabelSet:
        path = Path(path)
        if not (path / "manifest.json").exists():
            raise FileNotFoundError(f"labels: no manifest.json in {path}")
        manifest = json.loads((path / "manifest.json").read_text())
        t = pq.read_table(path / "labels.parquet")
        return cls(fixed_size_column(t, "x"), fixed_size_column(t, "cf"), t.column("distance").to_numpy(), t.column("delta_min").to_numpy(),
                   np.asarray(t.column("status").to_pylist()), t.column("runtime").to_numpy(),
                   manifest["feature_names"], np.asarray(manifest["column_feature"], np.int64))


def _solve_chunk(shared: tuple[Any, TabularWorld], X: np.ndarray) -> ChunkResult:
    solver, world = shared
    D = X.shape[1]
    out = {"cf": np.full((len(X), D), np.nan), "distance": np.full(len(X), np.inf),
           "delta_min": np.zeros(len(X)), "status": np.empty(len(X), dtype="<U16"), "runtime": np.zeros(len(X)),
           "X": np.asarray(X, float)}  # the agents themselves: a resumed chunk is checked against its input
    for i, x in enumerate(X):  # MACE solves one agent at a time (one MILP or SMT problem each)
        t = time.perf_counter()
        r = solver.solve(world, x)[0]
        out["runtime"][i] = time.perf_counter() - t
        if r.extra.get("reason") == "already_positive":
            out["status"][i] = "already_positive"
        else:
            out["status"][i] = r.status
        if r.status == "ok":
            out["cf"][i] = np.asarray(r.extra["counterfactual"], float)
            out["distance"][i] = float(r.extra["distance"])
            out["delta_min"][i] = float(r.extra.get("delta_min", 0.0))
    return out


def label_tabular(world: TabularWorld, X: np.ndarray, solver: Any, work_dir: str | Path, *,
                  chunk_size: int = 25, n_jobs: int = 2, progress: bool = True,
                  compute: ComputeConfig | None = None) -> MaceLabelSet:
    """Run ``solver`` (MACE) on every row of ``X``; resumable from ``work_dir/chunk_*.npz``.

    ``compute`` (default: local, ``n_jobs`` processes) says where the chunks run; its
    ``chunk_size``, when set, overrides ``chunk_size``.
    """
    X = world.schema.validate(X, name="X")
    compute = compute or ComputeConfig(n_workers=n_jobs)
    bounds = chunk_bounds(len(X), compute.chunk_size or chunk_size)
    parts = run_chunks(_solve_chunk, (solver, world), [X[s:e] for s, e in bounds], work_dir, compute=compute,
                       sizes=[e - s for s, e in bounds], progress=progress,
                       desc=f"{getattr(solver, 'label', 'MACE')} labels ({world.name})")  # GeCo on the black-box route
    for (s, e), p in zip(bounds, parts, strict=True):
        # chunks may come from another run or machine; a chunk of other agents must never label these
        if "X" in p and not np.array_equal(p["X"], X[s:e]):
            raise ValueError(f"work_dir: {work_dir} holds labels of other agents for rows {s}-{e} "
                             "(a cache from another data split or model); remove it")
    names, of_column = raw_feature_index(world.schema)
    cat = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0) for k in
           ("cf", "distance", "delta_min", "status", "runtime")}
    cf = cat["cf"].reshape(len(X), X.shape[1]) if len(X) else np.zeros((0, X.shape[1]))
    return MaceLabelSet(X, cf, cat["distance"], cat["delta_min"], cat["status"].astype(str), cat["runtime"],
                        names, of_column)
