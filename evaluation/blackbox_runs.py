"""A tabular run on the black-box route (issue 54): the user's model has no white box, so MACE cannot read it.

Such a run labels its agents with GeCo (``data_gen.geco_labels``; a heuristic: nothing is certified),
trains the generators on those labels, is evaluated against them ("reference: GeCo, not certified"),
is served with GeCo as the only fallback, and is not audited (the audit's bounds are MACE's).

Its world's model is ``data_gen.user_model.BlackBoxModel`` (the user's model, through its oracle),
which has no JSON: ``world/model.json`` is a marker of kind ``user_black_box`` naming the model file
and its SHA-256. ``fingerprint.json`` covers the marker, the marker must agree with ``route.json``,
and ``evaluation.user_runs.load_user_oracle`` checks the file against it before loading it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data_gen.user_model import BlackBoxModel
from evaluation.user_runs import load_user_oracle

BLACK_BOX_KIND = BlackBoxModel.kind  # "user_black_box": the model's kind, and the marker's
LABELS_LINE = "black-box route: labels by GeCo (heuristic, not certified)"
REFERENCE = "GeCo, not certified"
NOT_APPLICABLE = "n/a (black box)"
AUDIT_REFUSAL = "audit: the audit's certified bounds need a white box; this run is on the black-box route"


def is_black_box(world: Any) -> bool:
    """Whether ``world``'s model is the user's model seen as a black box (no white box, no MACE)."""
    return getattr(getattr(world, "model", None), "kind", None) == BLACK_BOX_KIND


def write_marker(world_dir: Path) -> None:
    """``world_dir/model.json``: the marker of a black-box model (after ``save_user_world`` wrote route.json)."""
    route = json.loads((world_dir / "route.json").read_text())
    if not route.get("model_file"):
        raise ValueError("world: a black-box world needs the user's model file (route.json names none)")
    marker = {"kind": BLACK_BOX_KIND, "route": route.get("route"), "estimator": route.get("estimator"),
              "model_file": route["model_file"], "model_sha256": route["model_sha256"]}
    (world_dir / "model.json").write_text(json.dumps(marker, indent=1))


def is_marker(model_json: dict[str, Any]) -> bool:
    """Whether a parsed ``model.json`` is a black-box marker (not a white box)."""
    return model_json.get("kind") == BLACK_BOX_KIND


def load_black_box_model(world_dir: Path, encoder: Any, marker: dict[str, Any], *, trusted: bool = False) -> Any:
    """The world's ``BlackBoxModel`` rebuilt from the stored user model; ``marker``: the parsed model.json
    (already checked against fingerprint.json); ``trusted``: as the run's config says."""
    route_path = world_dir / "route.json"
    if not route_path.exists():
        raise FileNotFoundError(f"world: {route_path} is missing (a black-box run keeps its route)")
    route = json.loads(route_path.read_text())
    if (route.get("model_file"), route.get("model_sha256")) != (marker.get("model_file"), marker.get("model_sha256")):
        raise ValueError(f"world: {route_path} names another model file than model.json; the file was changed")
    oracle = load_user_oracle(world_dir, encoder, trusted=trusted)  # checks the file's SHA-256 first
    return BlackBoxModel(oracle)
