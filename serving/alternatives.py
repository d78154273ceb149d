"""Alternatives of a tabular answer: diverse (each changes a different set of features, GeCo's
notion of diverse: distinct Δ), nearest first, and never nearer than the answer itself."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

Candidate = tuple[np.ndarray, float, str]  # (encoded counterfactual, distance, method)


def changed_features(codec: Any, x: np.ndarray, cf: np.ndarray) -> frozenset[int]:
    """The raw features (``codec.domains``) whose columns differ between ``x`` and ``cf``."""
    return frozenset(j for j, d in enumerate(codec.domains) if not np.array_equal(x[list(d.columns)], cf[list(d.columns)]))


def diverse(codec: Any, x: np.ndarray, primary: np.ndarray | None, cands: list[Candidate], n: int) -> list[Candidate]:
    """Up to ``n`` candidates, nearest first, each changing a different set of features than the
    answer and than every one kept before it."""
    seen = set() if primary is None else {changed_features(codec, x, primary)}
    out = []
    for c in sorted(cands, key=lambda t: t[1]):
        key = changed_features(codec, x, c[0])
        if len(out) < n and key not in seen:
            seen.add(key)
            out.append(c)
    return out


def nearest_first(codec: Any, x: np.ndarray, answer: Any, n: int) -> Any:
    """The answer is the nearest verified counterfactual known: an alternative nearer than it (GeCo
    topping up a generator's answer) takes its place, and it becomes an alternative. A certified
    optimum is left alone."""
    a = answer
    if a.status != "ok" or a.optimal or not a.alternatives or a.distance is None:
        return a
    cf, d, method = min(a.alternatives, key=lambda t: t[1])
    if d >= a.distance - 1e-12:
        return a
    kind = method if method in ("geco", "mace") else "generator"
    rest = [t for t in a.alternatives if t[0] is not cf] + [(a.cf, a.distance, a.method)]
    return replace(a, cf=cf, distance=d, method=method, kind=kind, optimal=None,
                   alternatives=diverse(codec, x, cf, rest, n))
