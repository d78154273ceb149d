"""The raw features of a schema: one per plain column, one per one-hot group (``Feature.group``).

MACE's distance (``solvers.mace.distance``), PLAF (``envs.rules.plaf_syntax``) and the rule language
(``envs.rules``) name and measure features by these, not by encoded columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from envs.schema import FeatureSchema

DistanceKind = Literal["numeric", "binary", "nominal", "group"]


@dataclass(frozen=True)
class DistanceFeature:
    """One raw feature: its encoded columns and how its delta is measured."""

    name: str  # the column name, or the one-hot group name
    kind: DistanceKind  # numeric: |dx|/R; binary/nominal/group: 1[changed]
    columns: tuple[int, ...]  # encoded column indices (several only for a group)
    span: float  # R_j = upper - lower for numeric features, 1 for the others


def distance_features(schema: FeatureSchema) -> tuple[DistanceFeature, ...]:
    """The raw features of a schema, in order of their first column."""
    out: list[DistanceFeature] = []
    groups: dict[str, list[int]] = {}
    for c, f in enumerate(schema.features):
        if f.group is not None:
            if f.group not in groups:
                groups[f.group] = []
                out.append(DistanceFeature(f.group, "group", (), 1.0))  # columns filled below
            groups[f.group].append(c)
        elif f.kind == "binary":
            out.append(DistanceFeature(f.name, "binary", (c,), 1.0))
        elif f.kind == "categorical":
            out.append(DistanceFeature(f.name, "nominal", (c,), 1.0))
        else:
            out.append(DistanceFeature(f.name, "numeric", (c,), float(f.upper - f.lower)))
    return tuple(DistanceFeature(r.name, r.kind, tuple(groups[r.name]), 1.0) if r.kind == "group" else r for r in out)
