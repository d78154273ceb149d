"""The black-box classifiers of the tabular worlds: training, white-box export and caching.

The four MACE classifiers (tree, forest, logistic regression, ReLU MLP) are trained with
scikit-learn on a data set of ``data_gen.loaders`` and exported as exact white-box copies
(``envs.models``); ``build_world`` trains (or reuses from a JSON cache) the model of one data set.
``python -m data_gen.classifiers`` tabulates their accuracy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier

from data_gen.loaders import DATASETS, TabularData, load_data
from data_gen.tabular_encoder import TabularEncoder
from envs.models import TreeEnsemble, WhiteBoxModel, from_sklearn
from envs.tabular import TabularWorld

CACHE_VERSION = 2  # 2: tree leaves store p0 (bit-exact forest probabilities)

# Defaults follow MACE B.1 (scikit-learn defaults; forest of 10 trees as in sklearn 0.20; MLP 10x10),
# except that trees are depth-limited: exact solvers scale with the leaves. Seed 0, unlimited vs
# max_depth=8, test accuracy (leaves per tree): Adult tree 0.817 (6,485) vs 0.855 (122), forest
# 0.842 (~6,300) vs 0.848 (~128); Credit tree 0.718 (5,004) vs 0.802 (187), forest 0.785 vs 0.806;
# German and COMPAS also equal or better at depth 8.
MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "tree": {"max_depth": 8},
    "forest": {"n_estimators": 10, "max_depth": 8},
    "lr": {"max_iter": 1000},
    "mlp": {"hidden_layer_sizes": (10, 10)},
}


def _estimator(model_class: str, seed: int, params: dict[str, Any]) -> Any:
    cls = {"tree": DecisionTreeClassifier, "forest": RandomForestClassifier, "lr": LogisticRegression,
           "mlp": MLPClassifier}[model_class]
    try:
        return cls(random_state=seed, **params)
    except TypeError as err:
        raise ValueError(f"model_kwargs: {err}") from None


def model_params(model_class: str, **model_kwargs: Any) -> dict[str, Any]:
    """The estimator's keyword arguments: the defaults of ``model_class`` updated by ``model_kwargs``."""
    if model_class not in MODEL_DEFAULTS:
        raise ValueError(f"model_class: unknown {model_class!r} (known: {sorted(MODEL_DEFAULTS)})")
    return {**MODEL_DEFAULTS[model_class], **model_kwargs}


def train_model(model_class: str, data: TabularData, *, seed: int = 0,
                **model_kwargs: Any) -> tuple[WhiteBoxModel, dict[str, Any]]:
    """Fit a seeded sklearn model and return its white-box copy (checked equal on the test set) and metrics.

    LR and MLP see StandardScaler-ed inputs; the scaler is folded into the white-box copy.
    """
    params = model_params(model_class, **model_kwargs)
    est = _estimator(model_class, seed, params)
    scaled = model_class in ("lr", "mlp")
    scaler = StandardScaler().fit(data.X_train) if scaled else None

    def prep(X: np.ndarray) -> np.ndarray:
        return scaler.transform(X) if scaled else X

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        est.fit(prep(data.X_train), data.y_train)
    fit_s = time.perf_counter() - t0
    model = from_sklearn(est, scaler.mean_, scaler.scale_) if scaled else from_sklearn(est)
    disagree = int((model.predict(data.X_test) != (est.predict(prep(data.X_test)) == 1)).sum())
    if disagree:
        raise RuntimeError(f"white-box {model_class} disagrees with sklearn on {disagree} test rows")
    trees = model.trees if isinstance(model, TreeEnsemble) else None
    metrics = {
        "train_accuracy": float(np.mean(model.predict(data.X_train) == data.y_train)),
        "test_accuracy": float(np.mean(model.predict(data.X_test) == data.y_test)),
        "leaves_per_tree": None if trees is None else [int((t.left < 0).sum()) for t in trees],
        "n_train": len(data.y_train),
        "n_test": len(data.y_test),
        "n_columns": len(data.encoder.schema),
        "n_test_negatives": int((~model.predict(data.X_test)).sum()),
        "fit_seconds": round(fit_s, 3),
        "converged": not any(issubclass(w.category, ConvergenceWarning) for w in caught),
        "params": params,
    }
    return model, metrics


@dataclass
class TabularBuild:
    """What ``build`` returns: the world, its encoded data and the model's metrics."""

    world: TabularWorld
    data: TabularData
    metrics: dict[str, Any]
    cache_path: Path
    cached: bool = False


def build(dataset: str, model_class: str, *, seed: int = 0, data_dir: str | Path | None = None,
          cache_dir: str | Path | None = "data_cache/tabular", **model_kwargs: Any) -> TabularBuild:
    """Train (or reuse from ``cache_dir``) the model of one data set; ``cache_dir=None``: no cache."""
    data = load_data(dataset, seed=seed, data_dir=data_dir)
    params = model_params(model_class, **model_kwargs)
    key = json.dumps({"v": CACHE_VERSION, "dataset": dataset, "model": model_class, "seed": seed,
                      "params": params, "data": data.fingerprint}, sort_keys=True, default=list)
    path = Path(cache_dir or ".") / f"{dataset}-{model_class}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    name = f"{dataset}/{model_class}"
    files = [path / n for n in ("model.json", "encoder.json", "metrics.json")]
    if cache_dir is not None and all(p.exists() for p in files):
        encoder = TabularEncoder.from_dict(json.loads(files[1].read_text()))
        if encoder != data.encoder:
            raise ValueError(f"cache: {files[1]} does not match the data's encoder (remove {path})")
        world = TabularWorld(name, encoder.schema, WhiteBoxModel.load(files[0]), encoder)
        return TabularBuild(world, data, json.loads(files[2].read_text()), path, cached=True)
    model, metrics = train_model(model_class, data, seed=seed, **model_kwargs)
    metrics = json.loads(json.dumps({"dataset": dataset, "model": model_class, "seed": seed, **metrics},
                                    default=list))  # as the cache holds them
    if cache_dir is not None:
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        model.save(tmp / "model.json")
        (tmp / "encoder.json").write_text(json.dumps(data.encoder.to_dict()))
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=1))
        try:
            tmp.rename(path)
        except OSError:  # a concurrent build finished first; its files are equal
            shutil.rmtree(tmp)
    return TabularBuild(TabularWorld(name, data.encoder.schema, model, data.encoder), data, metrics, path)


def build_world(dataset: str, model_class: str, *, seed: int = 0, data_dir: str | Path | None = None,
                cache_dir: str | Path | None = "data_cache/tabular", **model_kwargs: Any) -> TabularWorld:
    """The TabularWorld of ``dataset`` with a ``model_class`` classifier (see ``build``)."""
    built = build(dataset, model_class, seed=seed, data_dir=data_dir, cache_dir=cache_dir, **model_kwargs)
    return built.world


def negatives(world: TabularWorld, X: np.ndarray) -> np.ndarray:
    """The rows of ``X`` the world's model rejects: the agents to explain."""
    X = np.atleast_2d(np.asarray(X, float))
    return X[~world.accepts(X)]


# ---------------------------------------------------------------------------------------------- CLI

def results_table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown table of build metrics."""
    lines = ["| data set | model | train | test | encoded cols | train acc | test acc | test negatives "
             "| leaves per tree (mean / max) | converged | fit s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|:-:|---:|"]
    for m in rows:
        leaves = m["leaves_per_tree"]
        shown = f"{np.mean(leaves):.0f} / {max(leaves)}" if leaves else "-"
        lines.append(f"| {m['dataset']} | {m['model']} | {m['n_train']} | {m['n_test']} | {m['n_columns']} "
                     f"| {m['train_accuracy']:.4f} | {m['test_accuracy']:.4f} | {m['n_test_negatives']} "
                     f"| {shown} | {'yes' if m['converged'] else 'no'} | {m['fit_seconds']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Train the tabular worlds' classifiers and tabulate them.")
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--models", nargs="+", default=list(MODEL_DEFAULTS), choices=list(MODEL_DEFAULTS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None, help="default: $RECOURSE_DATA_DIR, else the bundled data/")
    ap.add_argument("--cache-dir", default="data_cache/tabular")
    ap.add_argument("--out", default="benchmarks/results/tabular_models.md")
    args = ap.parse_args(argv)
    rows = [build(d, m, seed=args.seed, data_dir=args.data_dir, cache_dir=args.cache_dir).metrics
            for d in args.datasets for m in args.models]
    table = f"Tabular classifiers (seed {args.seed}, 80/20 stratified split; `python -m data_gen.classifiers`)"
    table += f"\n\nModel defaults: `{json.dumps(MODEL_DEFAULTS)}` (sklearn's otherwise; seeded).\n\n"
    table += results_table(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(table)
    print(table)


if __name__ == "__main__":
    main()
