"""Offline batch mode: recommendations for a CSV or Parquet file of agents, written to a file.

The same code path as ``/recommend/batch`` (:meth:`RecommendationService.recommend_records`),
so a file answered offline matches what the HTTP service answers for the same agents; used by
``serve.py --batch-in ... --batch-out ...``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

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
    table = pd.DataFrame({
        "agent": np.arange(len(records)),
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
