"""What benchmarks/mace.py and its certificate audit (benchmarks/mace_audit.py) share: the seeded
sample of rejected test agents, the real scikit-learn model behind a world (refitted and checked
equal to its white box), an earlier revision's MACE, and number formatting."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import numpy as np
from sklearn.preprocessing import StandardScaler

from data_gen.classifiers import TabularBuild, _estimator, build, model_params, negatives
from envs.models import SklearnOracle, from_sklearn

NORM_INDEX = {"zero": 0, "one": 1, "infty": 2}
_REAL: dict[str, SklearnOracle] = {}


def real_model(b: TabularBuild, dataset: str, model: str, seed: int, model_kwargs: dict) -> SklearnOracle:
    """The scikit-learn model behind the world, refitted (seeded, deterministic) and checked equal to its
    white box: the build caches only the white box, and ``verified`` means accepted by the real model."""
    key = json.dumps([dataset, model, seed, model_kwargs], sort_keys=True)
    if key not in _REAL:
        _REAL[key] = _refit(b, dataset, model, seed, model_kwargs)
    return _REAL[key]


def _refit(b: TabularBuild, dataset: str, model: str, seed: int, model_kwargs: dict) -> SklearnOracle:
    est = _estimator(model, seed, model_params(model, **model_kwargs))
    scaler = StandardScaler().fit(b.data.X_train) if model in ("lr", "mlp") else None
    est.fit(b.data.X_train if scaler is None else scaler.transform(b.data.X_train), b.data.y_train)
    copy = from_sklearn(est) if scaler is None else from_sklearn(est, scaler.mean_, scaler.scale_)
    if json.dumps(copy.to_dict()) != json.dumps(b.world.model.to_dict()):
        raise RuntimeError(f"{dataset}/{model}: the refitted sklearn model differs from the cached white box")
    return SklearnOracle(est, scaler)


def sample(dataset: str, model: str, args: argparse.Namespace) -> tuple[TabularBuild, np.ndarray, SklearnOracle]:
    """The world, the seeded sample of its rejected test agents, and the real model."""
    kw = json.loads(args.model_kwargs)
    b = build(dataset, model, seed=args.seed, **kw)
    neg = negatives(b.world, b.data.X_test)
    rng = np.random.default_rng(args.seed)
    X = neg[np.sort(rng.choice(len(neg), size=min(args.agents, len(neg)), replace=False))]
    return b, X, real_model(b, dataset, model, args.seed, kw)


def fmt(v, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


@functools.cache
def _load_revision(rev: str) -> type:
    """The MACE class of solvers/mace at git revision ``rev``, imported as its own package (in a temp dir)."""
    import importlib
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parent.parent
    tmp = Path(tempfile.mkdtemp(prefix="mace_before_"))
    pkg = tmp / f"mace_{rev[:8]}"
    pkg.mkdir()
    names = subprocess.run(["git", "ls-tree", "--name-only", rev, "solvers/mace/"], cwd=root, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in names:
        src = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=root, check=True, capture_output=True, text=True).stdout
        (pkg / Path(name).name).write_text(src.replace("solvers.mace.", f"{pkg.name}.").replace(
            "from solvers.mace import", f"from {pkg.name} import"))
    sys.path.insert(0, str(tmp))
    return importlib.import_module(f"{pkg.name}.mace").MACE
