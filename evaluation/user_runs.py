"""A run on the user's own table and model (issue 54): what ``train.py`` stores beside the world, and
how the run's data and the user's model come back for evaluation, audits and serving.

A config's ``tabular:`` section names ``table`` (CSV or Parquet), ``target``, ``favourable``, an optional
``spec`` (a YAML path or a mapping, merged over the inferred one) and an optional ``model_file`` (with
``trusted`` for pickles). ``train.py`` then writes, under ``world/`` besides the model and encoder:

- ``spec.yaml``: the spec the run used (inferred fields and the user's, merged);
- ``data.npz``: the encoded split (train and test rows and labels), so the run needs the table no more;
- ``user_model.<ext>``: a copy of the user's model file (its SHA-256 in ``route.json``, checked on load);
- ``route.json``: the route (white box, certified by MACE, or black box), the agreement check's
  figures, and what the oracle needs (the model's columns, the table's dtypes, the favourable index).

Every served or batch answer of such a run is verified by the user's own model on the raw record
(:func:`load_user_oracle`), besides the white box.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from data_gen.loaders import TabularData
from data_gen.tabular_encoder import TabularEncoder

WORLD_FILES = ("spec.yaml", "data.npz", "route.json")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_user_table(tab: dict[str, Any]) -> bool:
    """Whether a run's ``tabular`` section names the user's table (not a bundled data set)."""
    return bool(tab.get("table"))


def save_user_world(out: Path, bundle: Any, *, model_file: str | None, source: str) -> None:
    """The spec, the encoded split, the model's copy and its route under ``out`` (a run's ``world/``)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.yaml").write_text(bundle.spec.to_yaml(source=source))
    d = bundle.data
    np.savez(out / "data.npz", X_train=d.X_train, y_train=d.y_train, X_test=d.X_test, y_test=d.y_test,
             fingerprint=np.array(d.fingerprint))
    route: dict[str, Any] = {"route": bundle.report.route, "estimator": bundle.report.estimator,
                             "report": str(bundle.report), "model_file": None}
    if bundle.agreement is not None:
        route["agreement"] = {k: v for k, v in vars(bundle.agreement).items() if _jsonable(v)}
    if model_file is not None:
        src = Path(model_file)
        dst = out / f"user_model{''.join(src.suffixes[-1:])}"
        shutil.copyfile(src, dst)
        route["model_file"] = dst.name
        route["model_sha256"] = _sha(dst)
    oracle = bundle.oracle
    if oracle is not None:
        route["oracle"] = {"columns": list(oracle.columns), "dtypes": {k: str(v) for k, v in oracle.dtypes.items()},
                           "positive": int(oracle.positive), "named": bool(oracle.named)}
    (out / "route.json").write_text(json.dumps(route, indent=1, default=str))


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except TypeError:
        return False


def load_user_data(world_dir: Path, encoder: TabularEncoder) -> TabularData:
    """The encoded split a user-table run stored (``data.npz``)."""
    path = world_dir / "data.npz"
    if not path.exists():
        raise FileNotFoundError(f"world: {path} is missing (an unfinished run on a user table)")
    with np.load(path, allow_pickle=False) as z:
        return TabularData(z["X_train"], z["y_train"], z["X_test"], z["y_test"], encoder, str(z["fingerprint"]))


def load_user_oracle(world_dir: Path, encoder: TabularEncoder, *, trusted: bool = False) -> Any:
    """The user's model as a verifier of encoded rows (``data_gen.user_model.UserModelOracle``), or None
    for a run that trained its own classifier. The model file's SHA-256 is checked first."""
    from data_gen.user_model import UserModelOracle, load_model

    route = json.loads((world_dir / "route.json").read_text())
    if not route.get("model_file"):
        return None
    path = world_dir / route["model_file"]
    if not path.exists():
        raise FileNotFoundError(f"world: {path} is missing")
    if _sha(path) != route["model_sha256"]:
        raise ValueError(f"world: {path} does not match its SHA-256 in route.json; the file was changed")
    o = route["oracle"]
    dtypes = {k: pd.api.types.pandas_dtype(v) if v != "category" else "category" for k, v in o["dtypes"].items()}
    return UserModelOracle(load_model(path, trusted=trusted), encoder, tuple(o["columns"]), dtypes,
                           int(o["positive"]), bool(o["named"]))
