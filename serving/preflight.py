"""Which family a run directory is, and whether its files are there, before any heavy import (serve.py).

``serve.py`` must listen within a second or two of its start (``/livez``), so it decides what to
build with nothing but ``yaml`` and the file system, and refuses a run that is plainly not servable
(no config, an unfinished or untrained run) in one line, before it listens. Everything else (the
fingerprints, the models' weights, the kernels) is checked while the server already answers the
probes (``serving/startup.py``); a failure there stops it with the reason on one line too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml

Family = Literal["tabular", "sequential", "capability"]


class PreflightError(ValueError):
    """A run directory that cannot be served; the message names the file."""


def _config(run_dir: Path) -> dict:
    path = run_dir / "config.yaml"
    if not path.exists():
        raise PreflightError(f"run: {path} is missing ({run_dir} is not a trained run directory)")
    try:
        cfg = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise PreflightError(f"run: {path} is not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(cfg, dict):
        raise PreflightError(f"run: {path} is not a run's config (not a mapping)")
    return cfg


def run_family(run_dir: str | Path) -> Family:
    """tabular (a ``tabular:`` mapping), sequential (a ``world`` name and ``policies``) or capability."""
    cfg = _config(Path(run_dir))
    if isinstance(cfg.get("tabular"), dict):
        return "tabular"
    if isinstance(cfg.get("world"), str) and "policies" in cfg:
        return "sequential"
    return "capability"


def check_files(run_dir: str | Path) -> Family:
    """The run's family, after the checks that need no import: the files a finished run of it has."""
    d = Path(run_dir)
    family = run_family(d)
    if family == "tabular":
        for name in ("fingerprint.json", "model.json", "encoder.json"):
            if not (d / "world" / name).exists():
                raise PreflightError(f"world: {d / 'world' / name} is missing (an unfinished run: run train.py)")
        gens = _config(d).get("generators") or []
        labels = [g.get("name") or g.get("method") for g in gens if isinstance(g, dict)]
        missing = [lab for lab in labels if lab and not (d / "models" / lab).exists()]
        if missing:
            raise PreflightError(f"run: model {missing[0]!r} was not trained ({d / 'models' / missing[0]} is missing; "
                                 "run train.py)")
    elif family == "capability":
        if not (d / "dataset.json").exists():
            raise PreflightError(f"run: {d / 'dataset.json'} is missing ({d} is not a trained run directory)")
        if not (d / "models").is_dir():
            raise PreflightError(f"model: {d / 'models'} is missing (not trained; run train.py first)")
    elif not (d / "labels.json").exists():
        raise PreflightError(f"run: {d / 'labels.json'} is missing (an unfinished sequential run: run train.py)")
    return family
