"""Build, store and load agent-CFE datasets (Parquet + a JSON manifest).

A dataset lives in ``<root>/<name>-<config hash>/``: ``world.json`` (the actions, costs,
thresholds and access), ``agents.parquet`` (every generated agent with its optimal CFE and the
reason it was dropped, if it was), and ``manifest.json`` (config, seed, sizes, statistics, content
hash), written last. It is reused when the manifest's config matches; a changed config gets a
new directory. Labelling resumes from finished chunks after an interruption.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from data_gen.config import EXECUTION_FIELDS, DatasetConfig
from data_gen.encodings import CfeVocabulary
from data_gen.labelling import label_population
from data_gen.splits import filter_mask, train_test_split
from data_gen.statistics import dataset_statistics
from data_gen.synthetic import make_world, sample_agents
from envs.capability import CapabilityWorld
from solvers.base import CoverLabels

MANIFEST = "manifest.json"


@dataclass
class Split:
    """Agents of one split with their optimal CFEs."""

    X: np.ndarray  # (B, n) uint8
    groups: np.ndarray  # (B,) hidden group (0 when the world has one)
    sets: np.ndarray  # (B, L) ascending action ids, -1 padded
    cost: np.ndarray  # (B,)
    class_ids: np.ndarray  # (B,) named-CFE class in the dataset vocabulary
    runtime: np.ndarray  # (B,) labelling seconds per agent

    def __len__(self) -> int:
        return len(self.X)

    @property
    def length(self) -> np.ndarray:
        return (self.sets >= 0).sum(1)


class Dataset:
    """A labelled dataset: the world, the kept agents and the manifest."""

    def __init__(self, path: Path, world: CapabilityWorld, table: dict[str, np.ndarray], manifest: dict[str, Any]):
        self.path, self.world, self.manifest = path, world, manifest
        self.config = DatasetConfig(**manifest["config"])
        kept = table["status"] == "kept"
        self.X = table["x"][kept]
        self.groups = table["group"][kept]
        self.sets = table["actions"][kept][:, : self.config.max_cfe_len]
        self.cost = table["cost"][kept]
        self.runtime = table["runtime"][kept]
        self.vocabulary = CfeVocabulary(self.sets, world.action_names)
        self.class_ids = self.vocabulary.encode(self.sets)

    def __len__(self) -> int:
        return len(self.X)

    @property
    def length(self) -> np.ndarray:
        return (self.sets >= 0).sum(1)

    def _take(self, idx: np.ndarray) -> Split:
        return Split(self.X[idx], self.groups[idx], self.sets[idx], self.cost[idx], self.class_ids[idx], self.runtime[idx])

    def split(self, rule: str = "all", test_fraction: float = 0.2, seed: int | None = None) -> tuple[Split, Split]:
        """Train/test split of the agents kept by a frequency filter (stratified for ``>N``)."""
        keep = np.flatnonzero(filter_mask(self.class_ids, rule))
        train, test = train_test_split(self.class_ids[keep], test_fraction,
                                       self.config.seed if seed is None else seed, stratify=rule != "all")
        return self._take(keep[train]), self._take(keep[test])


def dataset_dir(cfg: DatasetConfig, root: str | Path, name: str) -> Path:
    return Path(root) / f"{name}-{cfg.fingerprint()}"


def _write_table(path: Path, table: dict[str, np.ndarray]) -> None:
    n = table["x"].shape[1]
    cols = {
        "agent": pa.array(np.arange(len(table["x"]), dtype=np.int64)),
        "group": pa.array(table["group"].astype(np.int16)),
        "x": pa.FixedSizeListArray.from_arrays(pa.array(table["x"].reshape(-1)), n),
        "actions": pa.FixedSizeListArray.from_arrays(pa.array(table["actions"].reshape(-1).astype(np.int32)),
                                                     table["actions"].shape[1]),
        "length": pa.array(table["length"].astype(np.int8)),
        "cost": pa.array(table["cost"]),
        "n_optimal": pa.array(table["n_optimal"].astype(np.int8)),
        "runtime": pa.array(table["runtime"].astype(np.float32)),
        "status": pa.array(table["status"]).dictionary_encode(),
    }
    tmp = path.with_suffix(".tmp")
    pq.write_table(pa.table(cols), tmp, compression="zstd")
    os.replace(tmp, path)


def fixed_size_column(t: pa.Table, col: str) -> np.ndarray:
    """A FixedSizeList column of a Parquet table as a 2-D array (rows x list size)."""
    arr = t.column(col).combine_chunks()
    return arr.values.to_numpy(zero_copy_only=False).reshape(len(arr), arr.type.list_size)


def _read_table(path: Path) -> dict[str, np.ndarray]:
    t = pq.read_table(path)
    fixed = lambda col: fixed_size_column(t, col)  # noqa: E731

    return {
        "x": fixed("x").astype(np.uint8), "actions": fixed("actions").astype(np.int64),
        "group": t.column("group").to_numpy().astype(np.int64), "length": t.column("length").to_numpy(),
        "cost": t.column("cost").to_numpy(), "n_optimal": t.column("n_optimal").to_numpy(),
        "runtime": t.column("runtime").to_numpy(), "status": np.asarray(t.column("status").to_pylist()),
    }


def content_hash(table: dict[str, np.ndarray]) -> str:
    """SHA-256 of the deterministic columns (not of the file: runtimes differ between runs)."""
    h = hashlib.sha256()
    for col in ("x", "group", "actions", "cost", "n_optimal"):
        h.update(np.ascontiguousarray(table[col]).astype(np.float64 if col == "cost" else np.int64).tobytes())
    h.update("\n".join(map(str, table["status"])).encode())
    return h.hexdigest()


def load_dataset(path: str | Path) -> Dataset:
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        raise FileNotFoundError(f"dataset: no {MANIFEST} in {path} (not built, or interrupted before the end)")
    manifest = json.loads(manifest_path.read_text())
    table_path = path / "agents.parquet"
    try:
        table = _read_table(table_path)
    except (OSError, pa.ArrowException) as err:
        raise ValueError(f"dataset: cannot read {table_path} ({err})") from None
    if content_hash(table) != manifest["content_hash"]:
        raise ValueError(f"dataset: {table_path} does not match the manifest's content hash (modified or corrupt)")
    world = CapabilityWorld.from_dict(json.loads((path / "world.json").read_text()))
    if world.fingerprint() != manifest["world_fingerprint"]:
        raise ValueError(f"dataset: {path / 'world.json'} does not match the manifest's world fingerprint")
    return Dataset(path, world, table, manifest)


def label_status(labels: CoverLabels, max_cfe_len: int, require_unique: bool = True) -> np.ndarray:
    """Why each labelled (rejected) agent is dropped -- ``no_recourse``, ``too_long``,
    ``not_unique`` -- or ``kept`` (one rule for datasets and for ceilings computed from the world)."""
    status = np.full(len(labels.cost), "kept", dtype=object)
    status[~labels.has_cover] = "no_recourse"
    status[(status == "kept") & (labels.length > max_cfe_len)] = "too_long"
    if require_unique:
        status[(status == "kept") & (labels.n_optimal != 1)] = "not_unique"
    return status


def build_dataset(cfg: DatasetConfig, root: str | Path = "data_cache", name: str = "dataset",
                  progress: bool = True, solver: Any = None) -> Dataset:
    """Build the dataset a config describes, or reuse it when it already exists."""
    out = dataset_dir(cfg, root, name)
    if (out / MANIFEST).exists():
        manifest = json.loads((out / MANIFEST).read_text())
        same = {k: v for k, v in manifest["config"].items() if k not in EXECUTION_FIELDS}
        if same == json.loads(cfg.model_dump_json(exclude=set(EXECUTION_FIELDS))):
            return load_dataset(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rng = np.random.default_rng(cfg.seed)
    world = make_world(cfg, rng)
    X, groups = sample_agents(cfg, world, rng)
    (out / "world.json").write_text(json.dumps(world.to_dict()))
    status = np.full(len(X), "kept", dtype=object)
    positive = world.accepts(X, groups)
    status[positive] = "already_positive"
    todo = np.flatnonzero(~positive)
    if solver is None:
        from solvers.setcover_fast import FastSetCover

        solver = FastSetCover()
    labels, timing = label_population(world, X[todo], None if groups is None else groups[todo], solver,
                                      out / "chunks", cfg.chunk_size, progress=progress, compute=cfg.compute)
    width = max(labels.actions.shape[1], cfg.max_cfe_len)
    actions = np.full((len(X), width), -1, dtype=np.int64)
    actions[todo, : labels.actions.shape[1]] = labels.actions
    cost = np.zeros(len(X))
    cost[todo] = labels.cost
    n_optimal = np.ones(len(X), dtype=np.int8)
    n_optimal[todo] = labels.n_optimal
    runtime = np.zeros(len(X))
    runtime[todo] = labels.runtime
    length = (actions >= 0).sum(1)
    status[todo] = label_status(labels, cfg.max_cfe_len, cfg.require_unique)
    table = {"x": X, "group": np.zeros(len(X), int) if groups is None else groups, "actions": actions,
             "length": length, "cost": cost, "n_optimal": n_optimal, "runtime": runtime,
             "status": status.astype(str)}
    table_path = out / "agents.parquet"
    _write_table(table_path, table)
    manifest = {
        "name": name,
        "config": json.loads(cfg.model_dump_json()),
        "config_hash": cfg.fingerprint(),
        "seed": cfg.seed,
        "world_fingerprint": world.fingerprint(),
        "content_hash": content_hash(table),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "solver": solver.name,
        "labelling_seconds": round(timing["seconds"], 3),
        "build_seconds": round(time.perf_counter() - t0, 3),
        "generated": int(len(X)),
        "dropped": {k: int((status == k).sum()) for k in
                    ("already_positive", "no_recourse", "too_long", "not_unique")},
    }
    ds = Dataset(out, world, table, manifest)
    manifest["statistics"] = dataset_statistics(ds)
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, out / MANIFEST)
    shutil.rmtree(out / "chunks", ignore_errors=True)
    ds.manifest = manifest
    return ds
