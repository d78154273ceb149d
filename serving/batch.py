"""Offline batch mode: recommendations for a CSV or Parquet file of agents, written to a file.

The same code path as ``/recommend/batch`` (:meth:`RecommendationService.recommend_records`),
so a file answered offline matches what the HTTP service answers for the same agents; used by
``serve.py --batch-in ... --batch-out ...``.

``recommend_parquet`` handles a Parquet file too large for one machine: its row groups are
chunks of ``data_gen.compute.run_chunks`` (Ray tasks with ``--ray ADDRESS``), each read and
answered by a worker that loads the run once, checkpointed as it finishes (a rerun resumes),
and streamed into the output Parquet one chunk at a time. The run directory and the input must
be readable from every node (a shared filesystem) on a multi-node cluster.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from data_gen.compute import ComputeConfig, chunk_path, load_chunk, run_chunks
from serving.service import InputError, RecommendationService


def _read_agents(path: Path, n_features: int, feature_names: list[str]) -> tuple[Any, Any]:
    """Rows and groups of an agents file (columns f0..f{n-1}, the feature names, or a list column x)."""
    if not path.exists():
        raise InputError(f"batch-in: {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            df = pd.read_csv(path)
        elif suffix in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        else:
            raise InputError(f"batch-in: {path} must be .csv or .parquet")
    except (OSError, ValueError) as err:
        if isinstance(err, InputError):
            raise
        raise InputError(f"batch-in: cannot read {path} ({err})") from None
    return _agents_of_frame(df, n_features, feature_names)


def _agents_of_frame(df: pd.DataFrame, n_features: int, feature_names: list[str]) -> tuple[Any, Any]:
    """Rows and groups of a frame of agents (columns f0..f{n-1}, the feature names, or a list column x)."""
    if "x" in df.columns:
        try:
            rows = [json.loads(v) if isinstance(v, str) else list(v) for v in df["x"]]
        except (TypeError, ValueError) as err:
            raise InputError(f"x: expected a list of 0/1 per row ({err})") from None
    else:
        for cols in ([f"f{j}" for j in range(n_features)], feature_names):
            if all(c in df.columns for c in cols):
                break
        else:
            missing = [c for c in (f"f{j}" for j in range(n_features)) if c not in df.columns]
            raise InputError(f"columns: expected f0..f{n_features - 1} (or the world's feature names) or a list "
                             f"column 'x'; missing {missing[:5]}{'...' if len(missing) > 5 else ''}")
        rows = df[cols].to_numpy(dtype=float, na_value=np.nan)
    groups = None
    if "group" in df.columns:
        g = df["group"]
        if g.isna().any() or not pd.api.types.is_integer_dtype(g.dtype):
            raise InputError("group: expected an integer group id in every row")
        groups = g.to_numpy(dtype=np.int64)
    return rows, groups


def recommend_file(svc: RecommendationService, in_path: str | Path, out_path: str | Path) -> dict[str, int]:
    """Recommend for every agent of a CSV/Parquet file and write one row per agent (same path as HTTP)."""
    in_path, out_path = Path(in_path), Path(out_path)
    if out_path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise InputError(f"batch-out: {out_path} must be .csv or .parquet")
    rows, groups = _read_agents(in_path, svc.world.n_features, svc.world.feature_names)
    records = svc.recommend_records(rows, groups, "x", "group")
    table = _answers_frame(records)
    if groups is not None:
        table.insert(1, "group", groups)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if out_path.suffix.lower() == ".csv":
        for col in ("action_ids", "actions"):
            table[col] = [json.dumps(v) for v in table[col]]
        table.to_csv(out_path, index=False)
    else:
        table.to_parquet(out_path, index=False)
    return table["status"].value_counts().to_dict()


def _answers_frame(records: list[dict[str, Any]], first_agent: int = 0) -> pd.DataFrame:
    """One output row per answer (the columns of every batch output file)."""
    return pd.DataFrame({
        "agent": np.arange(first_agent, first_agent + len(records)),
        "status": [r["status"] for r in records],
        "action_ids": [[a["id"] for a in r["actions"]] for r in records],
        "actions": [[a["name"] for a in r["actions"]] for r in records],
        "cost": [r["cost"] for r in records],
        "confidence": [r["confidence"] for r in records],
        "verified": [r["verified"] for r in records],
        "method": [r["method"] for r in records],
        "optimal": pd.array([r["optimal"] for r in records], dtype="boolean"),
        "budget_exceeded": [r["budget_exceeded"] for r in records],
    })


def recommend_raw_file(svc: Any, in_path: str | Path, out_path: str | Path, n_diverse: int = 0) -> dict[str, int]:
    """Recommend for every raw record of a CSV/Parquet file (a tabular run's
    :class:`~serving.tabular.TabularService`; the same code path as ``/recommend/batch``).

    Columns named as the data set's raw features are the record; other columns (an id, say) are
    copied to the output unchanged, before the answer's columns: ``status``, ``changes`` (JSON list
    of ``{feature, from, to}``), ``distance``, ``verified``, ``method``, ``optimal``,
    ``budget_exceeded`` and ``alternatives`` (JSON).
    """
    in_path, out_path = Path(in_path), Path(out_path)
    if out_path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise InputError(f"batch-out: {out_path} must be .csv or .parquet")
    if not in_path.exists():
        raise InputError(f"batch-in: {in_path} does not exist")
    try:
        if in_path.suffix.lower() == ".csv":
            df = pd.read_csv(in_path)
        elif in_path.suffix.lower() in (".parquet", ".pq"):
            df = pd.read_parquet(in_path)
        else:
            raise InputError(f"batch-in: {in_path} must be .csv or .parquet")
    except (OSError, ValueError) as err:
        if isinstance(err, InputError):
            raise
        raise InputError(f"batch-in: cannot read {in_path} ({err})") from None
    names = svc.codec.names
    missing = [n for n in names if n not in df.columns]
    if missing:
        raise InputError(f"columns: the data set's features {missing} are missing from {in_path.name}")
    out = _raw_answers_frame(svc, df, n_diverse)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if out_path.suffix.lower() == ".csv":
        out.to_csv(out_path, index=False)
    else:
        out.to_parquet(out_path, index=False)
    return out["status"].value_counts().to_dict()


def _raw_answers_frame(svc: Any, df: pd.DataFrame, n_diverse: int = 0, first_row: int = 0) -> pd.DataFrame:
    """The output rows of raw records ``df`` (numbered from ``first_row``): copied columns, then the answer's."""
    names = svc.codec.names
    results = svc.recommend_records(df[names].to_dict("records"), n_diverse, field="rows")
    out = df[[c for c in df.columns if c not in names]].reset_index(drop=True)
    out.insert(0, "row", np.arange(first_row, first_row + len(df)))
    out["status"] = [r["status"] for r in results]
    out["changes"] = [json.dumps(r["changes"]) for r in results]
    out["distance"] = [r["distance"] for r in results]
    out["verified"] = [r["verified"] for r in results]
    out["method"] = [r["method"] for r in results]
    out["optimal"] = pd.array([r["optimal"] for r in results], dtype="boolean")
    out["budget_exceeded"] = [r["budget_exceeded"] for r in results]
    out["alternatives"] = [json.dumps(r["alternatives"]) for r in results]
    return out


# ---------------------------------------------------------------- large Parquet files, chunked (Ray)

_OUTPUT_TYPES = {c: pa.field(c, t) for c, t in [
    ("agent", pa.int64()), ("group", pa.int64()), ("status", pa.string()), ("action_ids", pa.list_(pa.int64())),
    ("actions", pa.list_(pa.string())), ("cost", pa.float64()), ("confidence", pa.float64()),
    ("verified", pa.bool_()), ("method", pa.string()), ("optimal", pa.bool_()), ("budget_exceeded", pa.bool_())]}


@functools.lru_cache(maxsize=4)
def _worker_service(options: tuple) -> RecommendationService:
    """The service of a run, loaded once per worker process (a chunk task reuses it)."""
    run_dir, model, rule, seed, budget_s, max_batch = options
    return RecommendationService(run_dir, model, rule, seed, budget_s, max_batch)


def _recommend_chunk(shared: tuple, chunk: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """Answer the rows ``[start, stop)`` of one row group of the input (a chunk task)."""
    options, in_path = shared
    row_group, start, stop = chunk
    svc = _worker_service(options)
    df = pq.ParquetFile(in_path).read_row_group(row_group).slice(start, stop - start).to_pandas()
    rows, groups = _agents_of_frame(df, svc.world.n_features, svc.world.feature_names)
    records = svc.recommend_records(rows, groups, "x", "group")
    width = max([len(r["actions"]) for r in records] + [1])
    ids = np.full((len(records), width), -1, np.int64)
    for i, r in enumerate(records):
        ids[i, : len(r["actions"])] = [a["id"] for a in r["actions"]]
    opt = np.array([-1 if r["optimal"] is None else int(r["optimal"]) for r in records], np.int8)
    return {"status": np.array([r["status"] for r in records], dtype="U32"), "action_ids": ids,
            "cost": np.array([np.nan if r["cost"] is None else r["cost"] for r in records], float),
            "confidence": np.array([np.nan if r["confidence"] is None else r["confidence"] for r in records], float),
            "verified": np.array([r["verified"] for r in records], bool),
            "method": np.array([r["method"] for r in records], dtype="U64"), "optimal": opt,
            "budget_exceeded": np.array([r["budget_exceeded"] for r in records], bool),
            "group": np.full(len(records), -1, np.int64) if groups is None else np.asarray(groups, np.int64)}


def _parquet_chunks(in_path: Path, out_path: Path, compute: ComputeConfig | None,
                    chunk_size: int) -> tuple[list[tuple[int, int, int]], bool]:
    """``(row group, start, stop)`` chunks of a Parquet input, and whether it has a ``group`` column."""
    if in_path.suffix.lower() not in (".parquet", ".pq") or out_path.suffix.lower() not in (".parquet", ".pq"):
        raise InputError("batch: chunked recommendation reads and writes Parquet (.parquet)")
    if not in_path.exists():
        raise InputError(f"batch-in: {in_path} does not exist")
    try:
        meta = pq.ParquetFile(in_path).metadata
        has_group = "group" in pq.ParquetFile(in_path).schema_arrow.names
    except (OSError, pa.ArrowException) as err:
        raise InputError(f"batch-in: cannot read {in_path} ({err})") from None
    size = (compute.chunk_size if compute is not None else None) or chunk_size
    return [(g, s, min(s + size, meta.row_group(g).num_rows))
            for g in range(meta.num_row_groups) for s in range(0, meta.row_group(g).num_rows, size)], has_group


def recommend_parquet(svc: RecommendationService, in_path: str | Path, out_path: str | Path, work_dir: str | Path, *,
                      compute: ComputeConfig | None = None, chunk_size: int = 50_000,
                      progress: bool = True) -> dict[str, int]:
    """Recommend for every agent of a large Parquet file in chunks (local or Ray), resumable from ``work_dir``.

    Each worker loads the run of ``svc`` itself and verifies every answer as the HTTP service
    does; the output has the columns of :func:`recommend_file`, written one chunk at a time.
    """
    in_path, out_path = Path(in_path), Path(out_path)
    chunks, has_group = _parquet_chunks(in_path, out_path, compute, chunk_size)
    compute = compute or ComputeConfig()
    options = (str(Path(svc.run_dir).resolve()), svc.model_name, svc.rule, svc.seed, svc.fallback_budget_s,
               svc.max_batch)
    work_dir = Path(work_dir)
    run_chunks(_recommend_chunk, (options, str(in_path.resolve())), chunks, work_dir, compute=compute,
               sizes=[e - s for _, s, e in chunks], desc="batch recommendations", progress=progress,
               keep_results=False)
    items = svc.action_items
    first = 0

    def frame(i: int) -> pd.DataFrame:
        nonlocal first
        part = load_chunk(chunk_path(work_dir, i))
        sets = [[int(a) for a in row if a >= 0] for row in part["action_ids"]]
        records = [{"status": str(st), "actions": [items[a] for a in ids], "cost": c, "confidence": cf,
                    "verified": bool(v), "method": str(m), "optimal": None if o < 0 else bool(o),
                    "budget_exceeded": bool(b)}
                   for st, ids, c, cf, v, m, o, b in zip(part["status"], sets, part["cost"], part["confidence"],
                                                          part["verified"], part["method"], part["optimal"],
                                                          part["budget_exceeded"], strict=True)]
        table = _answers_frame(records, first)
        if has_group:
            table.insert(1, "group", part["group"])
        first += len(records)
        return table

    return _write_chunks(len(chunks), frame, out_path, lambda t: pa.schema([_OUTPUT_TYPES[c] for c in t.columns]))


def _write_chunks(n_chunks: int, frame: Any, out_path: Path, schema: Any = None) -> dict[str, int]:
    """Stream ``frame(i)`` for every chunk into one Parquet file (one chunk in memory at a time, written
    to a temporary name and moved into place whole); returns the answers per status."""
    counts: dict[str, int] = {}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".tmp")
    writer = None
    try:
        for i in range(n_chunks):
            table = frame(i)
            for k, v in table["status"].value_counts().items():
                counts[k] = counts.get(k, 0) + int(v)
            arrow = pa.Table.from_pandas(table, schema=None if schema is None else schema(table), preserve_index=False)
            writer = writer or pq.ParquetWriter(tmp, arrow.schema)
            writer.write_table(arrow)
    finally:
        if writer is not None:
            writer.close()
    tmp.replace(out_path)
    return counts


# ---------------------------------------------------------------- tabular runs: raw records, chunked (Ray)

_RAW_STRINGS = ("status", "changes", "method", "alternatives")  # answer columns kept as strings in a chunk file


@functools.lru_cache(maxsize=4)
def _tabular_worker_service(options: tuple) -> Any:
    """The tabular service of a run, loaded once per worker process (a chunk task reuses it)."""
    from serving.tabular import TabularService

    run_dir, model, budget_s, max_batch, max_diverse = options
    return TabularService(run_dir, model, budget_s, max_batch, max_diverse)


def _read_slice(in_path: str | Path, chunk: tuple[int, int, int]) -> pd.DataFrame:
    row_group, start, stop = chunk
    return pq.ParquetFile(in_path).read_row_group(row_group).slice(start, stop - start).to_pandas()


def _recommend_raw_chunk(shared: tuple, chunk: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """Answer the raw records ``[start, stop)`` of one row group of the input (a chunk task of a tabular run)."""
    options, in_path, n_diverse = shared
    svc = _tabular_worker_service(options)
    out = _raw_answers_frame(svc, _read_slice(in_path, chunk), n_diverse)
    result = {c: np.array(out[c].tolist(), dtype=str) for c in _RAW_STRINGS}
    result["distance"] = np.array([np.nan if d is None else d for d in out["distance"]], float)
    result["verified"] = out["verified"].to_numpy(bool)
    result["budget_exceeded"] = out["budget_exceeded"].to_numpy(bool)
    result["optimal"] = np.array([-1 if pd.isna(o) else int(o) for o in out["optimal"]], np.int8)
    return result


def recommend_raw_parquet(svc: Any, in_path: str | Path, out_path: str | Path, work_dir: str | Path, *,
                          compute: ComputeConfig | None = None, chunk_size: int = 50_000, n_diverse: int = 0,
                          progress: bool = True) -> dict[str, int]:
    """Recommend for every raw record of a large Parquet file in chunks (local or Ray), resumable from
    ``work_dir`` (a tabular run's :class:`~serving.tabular.TabularService`).

    Each worker loads the run of ``svc`` once and answers its chunks with the code of
    :func:`recommend_raw_file` (so the answers are the same); the output has that function's columns
    (``distance`` as a float, NaN where there is none) and is written one chunk at a time, the copied
    columns read again from the input.
    """
    in_path, out_path = Path(in_path), Path(out_path)
    chunks, _ = _parquet_chunks(in_path, out_path, compute, chunk_size)
    missing = [n for n in svc.codec.names if n not in pq.ParquetFile(in_path).schema_arrow.names]
    if missing:
        raise InputError(f"columns: the data set's features {missing} are missing from {in_path.name}")
    options = (str(Path(svc.run_dir).resolve()), svc.model_name, svc.fallback_budget_s, svc.max_batch,
               max(svc.max_diverse, n_diverse))
    work_dir = Path(work_dir)
    run_chunks(_recommend_raw_chunk, (options, str(in_path.resolve()), n_diverse), chunks, work_dir,
               compute=compute or ComputeConfig(), sizes=[e - s for _, s, e in chunks], desc="batch recommendations",
               unit="record", progress=progress, keep_results=False)
    first = 0

    def frame(i: int) -> pd.DataFrame:
        nonlocal first
        part = load_chunk(chunk_path(work_dir, i))
        df = _read_slice(in_path, chunks[i])
        out = df[[c for c in df.columns if c not in svc.codec.names]].reset_index(drop=True)
        out.insert(0, "row", np.arange(first, first + len(df)))
        first += len(df)
        for c in ("status", "changes", "distance", "verified", "method", "optimal", "budget_exceeded",
                  "alternatives"):
            v = part[c]
            out[c] = (pd.array([None if o < 0 else bool(o) for o in v], dtype="boolean") if c == "optimal"
                      else v.astype(object) if c in _RAW_STRINGS else v)
        return out

    return _write_chunks(len(chunks), frame, out_path)
