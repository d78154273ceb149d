"""Build the sequential worlds of CSCF from the bundled data: data, black box, actions, graph.

``build_sequential("adult")`` loads the data set, trains (or reuses from the JSON cache of
:mod:`data_gen.classifiers`) the black box of the spec (Adult: ReLU MLP 2x50, German: 2x40) and
wraps it with the CSCF action set of :mod:`envs.sequential_cscf` into a
:class:`~envs.sequential.SequentialWorld`. Any classifier of ``data_gen.classifiers``
(``model_class="forest"``, ...) works instead. ``python -m data_gen.sequential_worlds`` trains
both, prints their test accuracy and saves the worlds as JSON.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data_gen.classifiers import build
from data_gen.loaders import TabularData
from envs.sequential import SequentialWorld
from envs.sequential_cscf import adult_actions, adult_discounts, german_actions

# The black boxes of the spec. German's 2x40 MLP overfits 800 rows with sklearn's default L2
# (alpha 1e-4: test accuracy 0.705-0.74 over seeds 0-2); alpha 10 gives 0.76-0.775 (CSCF: ~0.79
# with dropout 0.7, which sklearn's MLP lacks).
WORLDS: dict[str, dict[str, Any]] = {
    "adult": {"dataset": "adult", "actions": adult_actions, "discounts": adult_discounts,
              "mlp": {"hidden_layer_sizes": (50, 50)}},
    "german": {"dataset": "german_full", "actions": german_actions, "discounts": None,
               "mlp": {"hidden_layer_sizes": (40, 40), "alpha": 10.0}},
}
DEFAULT_CACHE = "data_cache/sequential"


@dataclass
class SequentialBuild:
    """What :func:`build_sequential` returns: the world, its encoded data split and the model's metrics."""

    world: SequentialWorld
    data: TabularData
    metrics: dict[str, Any]
    cached: bool


def build_sequential(name: str, *, model_class: str = "mlp", discounts: bool = True, seed: int = 0,
                     data_dir: str | Path | None = None, cache_dir: str | Path | None = DEFAULT_CACHE,
                     grids: dict[str, tuple[float, ...]] | None = None, **model_kwargs: Any) -> SequentialBuild:
    """The ``adult`` or ``german`` sequential world with its trained (cached) black box.

    ``discounts=False`` gives CSCF's "scf" variant (c = b; German has no graph either way);
    ``grids`` replaces action value grids by name; ``model_kwargs`` override the estimator's.
    """
    if name not in WORLDS:
        raise ValueError(f"name: unknown sequential world {name!r} (known: {sorted(WORLDS)})")
    spec = WORLDS[name]
    kwargs = {**(spec["mlp"] if model_class == "mlp" else {}), **model_kwargs}
    built = build(spec["dataset"], model_class, seed=seed, data_dir=data_dir, cache_dir=cache_dir, **kwargs)
    schema = built.world.schema
    edges = spec["discounts"]() if discounts and spec["discounts"] is not None else ()
    meta = {"dataset": spec["dataset"], "model_class": model_class, "seed": seed,
            "variant": "cscf" if edges else "scf",
            **{k: built.metrics[k] for k in ("train_accuracy", "test_accuracy", "params") if k in built.metrics}}
    world = SequentialWorld(name if edges or spec["discounts"] is None else f"{name}/scf", schema,
                            spec["actions"](schema, grids), built.world.model, edges, meta)
    return SequentialBuild(world, built.data, built.metrics, built.cached)


def sequential_world(name: str, **kwargs: Any) -> SequentialWorld:
    """The world of :func:`build_sequential` alone."""
    return build_sequential(name, **kwargs).world


def rejected_agents(built: SequentialBuild, n: int | None = None, *, seed: int = 0,
                    split: str = "test") -> np.ndarray:
    """``n`` agents the black box rejects, drawn at random (seeded) from the ``test`` split, or from
    ``all`` rows (test first, then train) where the test split has too few."""
    if split not in ("test", "all"):
        raise ValueError(f"split: expected 'test' or 'all', got {split!r}")
    X = built.data.X_test if split == "test" else np.concatenate([built.data.X_test, built.data.X_train])
    neg = X[~built.world.accepts(X)]
    rng = np.random.default_rng(seed)
    if split == "all":  # keep test agents first so a larger n only adds training agents
        n_test = int((~built.world.accepts(built.data.X_test)).sum())
        idx = np.concatenate([rng.permutation(n_test), n_test + rng.permutation(len(neg) - n_test)])
    else:
        idx = rng.permutation(len(neg))
    return neg[idx[:n]] if n is not None else neg[idx]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Train the sequential worlds' black boxes and save the worlds.")
    ap.add_argument("--worlds", nargs="+", default=list(WORLDS), choices=list(WORLDS))
    ap.add_argument("--model", default="mlp", help="a model class of data_gen.classifiers (default: the spec's MLP)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", default=DEFAULT_CACHE)
    ap.add_argument("--out", default=None, help="directory for <world>.json (default: the cache directory)")
    args = ap.parse_args(argv)
    out = Path(args.out or args.cache_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.worlds:
        b = build_sequential(name, model_class=args.model, seed=args.seed, cache_dir=args.cache_dir)
        path = out / f"{name}.json"
        b.world.save(path)
        rows.append({"world": name, "model": args.model, "train_accuracy": round(b.metrics["train_accuracy"], 4),
                     "test_accuracy": round(b.metrics["test_accuracy"], 4), "test_rejected":
                     b.metrics["n_test_negatives"], "fingerprint": b.world.fingerprint(), "saved": str(path)})
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
