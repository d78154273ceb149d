"""A tabular run as the service loads it: is a directory one, load it, and the fingerprint it serves.

``load_run`` goes through ``evaluation.tabular_experiment.load_tabular_run`` (the world's model,
encoder and rules are checked against ``world/fingerprint.json`` there; a mismatch is refused at
start), every problem a :class:`serving.service.ServiceError` naming the file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from serving.service import ServiceError


def is_tabular_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir/config.yaml`` has a top-level ``tabular:`` mapping (a run of a real data set)."""
    import yaml

    path = Path(run_dir) / "config.yaml"
    try:
        cfg = yaml.safe_load(path.read_text()) if path.exists() else None
    except (OSError, yaml.YAMLError):  # an unreadable config: the capability loader reports it
        return False
    return isinstance(cfg, dict) and isinstance(cfg.get("tabular"), dict)


def load_run(run_dir: str | Path) -> Any:
    """A tabular run directory loaded (``evaluation.tabular_experiment.load_tabular_run``), every problem
    a ``ServiceError`` naming the file."""
    try:
        from evaluation.tabular_experiment import load_tabular_run
    except ImportError as err:
        raise ServiceError(f"run: cannot load tabular runs here ({err})") from None
    try:
        return load_tabular_run(Path(run_dir))
    except (ValueError, OSError, KeyError) as err:  # a fingerprint mismatch names the file
        msg = str(err)
        raise ServiceError(msg if msg.startswith(("run:", "world:")) else f"run: {msg}") from None


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def run_fingerprint(run_dir: Path, world: Any) -> dict[str, str]:
    """The run's ``world/fingerprint.json``; for a run handed in directly (tests), hashes of what is served."""
    path = Path(run_dir) / "world" / "fingerprint.json"
    if path.exists():
        return {k: str(v) for k, v in json.loads(path.read_text()).items()}
    out = {"model_sha256": _sha(world.model.to_dict()), "encoder_sha256": _sha(world.encoder.to_dict())}
    if getattr(world, "rules", None):
        out["rules_sha256"] = _sha(world.rules.to_dict())
    return out
