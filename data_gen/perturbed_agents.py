"""More training agents than a data set has rejected rows: rejected rows perturbed within their box.

A tabular generator learns from MACE's answers, and a data set has few rejected rows to label
(German about 300). ``perturb_agents`` draws new agents from the data distribution around the
real ones: a random rejected row, each numeric column moved by Gaussian noise (a share of the
column's span; integer columns rounded), each binary / ordinal / categorical feature resampled
from the rows' own values with a small probability; every value stays within the schema's
bounds. Only rows the model still rejects are kept (an accepted row needs no recourse), and rows
equal to a real one or to each other are dropped. The draw is vectorized and seeded.

Held-out evaluation never uses these agents: they only add training labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.tabular import TabularWorld


@dataclass(frozen=True)
class PerturbParams:
    """How far a generated agent lies from the rejected row it was drawn around."""

    numeric_scale: float = 0.05  # Gaussian noise on numeric columns, as a share of the column's span
    resample_prob: float = 0.15  # chance that a discrete feature takes another row's value

    def __post_init__(self) -> None:
        if not self.numeric_scale >= 0:
            raise ValueError(f"numeric_scale: must be >= 0, got {self.numeric_scale}")
        if not 0 <= self.resample_prob <= 1:
            raise ValueError(f"resample_prob: must lie in [0, 1], got {self.resample_prob}")


def _raw_blocks(world: TabularWorld) -> list[tuple[str, np.ndarray]]:
    """(kind, columns) per raw feature: 'numeric' for a real/integer column, 'discrete' otherwise
    (binary, ordinal or a one-hot group, resampled whole)."""
    from solvers.mace.distance import distance_features

    out = []
    for r in distance_features(world.schema):
        cols = np.asarray(r.columns)
        f = world.schema.features[cols[0]]
        discrete = r.kind != "numeric" or f.kind in ("binary", "ordinal", "categorical")
        out.append(("discrete" if discrete else "numeric", cols))
    return out


def perturb_agents(world: TabularWorld, rows: np.ndarray, n: int, *, seed: int = 0,
                   params: PerturbParams | None = None, max_rounds: int = 50,
                   allow_fewer: bool = False, exclude: np.ndarray | None = None) -> np.ndarray:
    """``n`` new rejected agents drawn around ``rows`` (encoded, rejected by the model).

    Raises ``ValueError`` when ``rows`` is empty, and when fewer than ``n`` new rejected agents
    turn up in ``max_rounds`` draws (the noise keeps crossing the decision boundary, or a data set
    of few discrete values has no new rows left near its rejected ones); with ``allow_fewer`` it
    returns those it found instead. Rows equal to one of ``exclude`` (e.g. agents an earlier call
    drew) are never returned either: they count as seen, as ``rows`` do."""
    params = params or PerturbParams()
    rows = world.schema.validate(np.atleast_2d(np.asarray(rows, float)), name="rows")
    if n <= 0:
        return np.zeros((0, rows.shape[1]))
    if not len(rows):
        raise ValueError("rows: no rejected rows to draw agents around")
    rng = np.random.default_rng(seed)
    lo, hi = (np.asarray(b, float) for b in world.schema.bounds())
    span = hi - lo
    integer = np.array([f.kind in ("binary", "ordinal", "categorical") or f.group is not None
                        or bool(getattr(f, "integer", False)) for f in world.schema.features])
    blocks = _raw_blocks(world)
    seen = {r.tobytes() for r in rows}
    if exclude is not None and len(exclude):
        seen.update(r.tobytes() for r in np.asarray(exclude, float).reshape(-1, rows.shape[1]))
    kept: list[np.ndarray] = []
    total = 0
    for _ in range(max_rounds):
        m = max(64, 2 * (n - total))
        base = rows[rng.integers(len(rows), size=m)]
        new = base.copy()
        for kind, cols in blocks:
            if kind == "numeric":
                c = cols[0]
                v = base[:, c] + rng.normal(0.0, params.numeric_scale * span[c], size=m)
                new[:, c] = np.round(v) if integer[c] else v
            else:  # another row's value of the whole feature (its one-hot group together)
                swap = rng.random(m) < params.resample_prob
                donor = rows[rng.integers(len(rows), size=m)]
                new[np.ix_(swap, cols)] = donor[np.ix_(swap, cols)]
        new = np.clip(new, lo, hi)
        new = new[~world.accepts(new)]
        fresh = []
        for r in new:
            key = r.tobytes()
            if key not in seen:
                seen.add(key)
                fresh.append(r)
        if fresh:
            kept.append(np.asarray(fresh))
            total += len(fresh)
        if total >= n:
            return np.concatenate(kept)[:n]
    if allow_fewer:
        return np.concatenate(kept) if kept else np.zeros((0, rows.shape[1]))
    raise ValueError(f"perturb_agents: only {total} of {n} new rejected agents in {max_rounds} rounds "
                     f"(lower numeric_scale / resample_prob, or give more rows)")
