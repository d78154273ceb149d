"""One definition of the point-counterfactual metrics, for every method that returns counterfactuals.

MACE, GeCo, MD-PSO and the generators all answer an agent x with a list of ``Recourse`` whose
``final_state`` is a counterfactual row; ``CounterfactualScorer`` scores that list the same way
for all of them (PSO paper §IV-D for the set metrics, MACE §4.2 for the distance):

- **validity**: share of the returned counterfactuals the world's model accepts and that keep the world's
  rules (``envs.rules``, issue 55: the shared checker, ``world.compiled_rules()``); a rule-breaking row
  is invalid;
- **proximity** (continuous): mean over the counterfactuals of (1/n_cont) sum |x'_j - x_j| / MAD_j
  over the numeric and ordinal features (MAD of the data; a MAD of 0 counts as 1, as DiCE does);
  **proximity_cat**: mean share of categorical and binary features changed;
- **sparsity**: mean share of the (raw) features changed;
- **diversity**: mean over pairs of d(x'_i, x'_j) = d_cont + d_cat; **normalized diversity**:
  mean over pairs of d(x'_i, x'_j) / (prox(x'_i) + prox(x'_j)), prox being d to x;
- **coverage**: 1 when the method returned ``n_diverse`` valid counterfactuals, else 0 (an agent
  without that many is not covered, PSO §IV-D); **found**: at least one valid;
- **changed**: raw features changed by the nearest valid counterfactual (and their mean);
- **distance**: the nearest valid counterfactual's distance in MACE's normalization (norm ``norm``), with
  the world's cost weights where its rules carry them (``solvers.mace.distance``, as MACE minimises);
  **distance_accepted**: the nearest counterfactual the model accepts, constraints ignored (what a
  method that breaks constraints would claim);
- **violations**: counterfactuals that break the schema (range, integrality, one-hot), a PLAF
  rule (the schema's mutability and the world's constraint program) or one of the world's rules;
- **model_calls**, **seconds**, **cpu_seconds**: as the caller measured them (model calls: or as
  the method reported them); CPU seconds are the fairer clock on a shared machine.

The set metrics are computed over the valid counterfactuals. ``summarize`` averages agents (and
counts the agents with a valid / an accepted answer); ``gap_summary`` and ``ratio_summary``
compare a method's distances with a certified optimum (MACE's); ``dominates`` says whether one
method's summary is at least as good as another's on every axis of issue 36 (validity, violations,
distance ratio, seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from envs.recourse import Recourse
from solvers.geco.plaf import CompiledPlaf, Plaf, default_program
from solvers.mace.distance import Norm, deltas, directions, distance_features, mix, norm_weights


class CounterfactualScorer:
    """Scores the counterfactuals of one agent; ``fit`` takes the world and the reference data (MAD)."""

    def __init__(self, n_diverse: int = 5, norm: Norm = "one", plaf: Plaf | None = None) -> None:
        self.n_diverse = n_diverse  # k of coverage: counterfactuals a method was asked for
        self.norm = norm  # MACE's distance: "zero", "one", "infty" or (alpha, beta, gamma)
        self.plaf = plaf  # constraints counted as violations; None: the world's default program

    def fit(self, world: Any, data: np.ndarray) -> CounterfactualScorer:
        if int(self.n_diverse) < 1:
            raise ValueError(f"n_diverse: must be >= 1, got {self.n_diverse!r}")
        schema = world.schema
        D = schema.validate(data, name="data")
        self.world_ = world
        self.raws_ = distance_features(schema)
        self.weights_ = norm_weights(self.norm, len(self.raws_))
        self.cont_ = np.array([r.kind == "numeric" for r in self.raws_])
        cols = np.array([r.columns[0] for r in self.raws_])
        mad = np.median(np.abs(D[:, cols] - np.median(D[:, cols], axis=0)), axis=0)
        self.mad_ = np.where(self.cont_ & (mad > 0), mad, 1.0)
        self.cols_ = cols
        plaf = default_program(getattr(world, "name", "")) if self.plaf is None else self.plaf
        self.program_: CompiledPlaf = plaf.compile(schema)
        rules = world.compiled_rules() if callable(getattr(world, "compiled_rules", None)) else None
        self.rules_ = rules  # the world's rules (the shared checker); None: none
        self.cost_ = rules.cost if rules is not None and rules.weighted else None
        return self

    def distance(self, x: np.ndarray, X: np.ndarray) -> np.ndarray:
        """MACE's distance of every row of ``X`` from ``x`` (norm ``norm``), with the world's cost weights."""
        W = None if self.cost_ is None else directions(self.raws_, x, X, self.cost_)
        return mix(deltas(self.raws_, x, X), self.weights_, W)

    # ------------------------------------------------------------------------------ pieces

    def _split(self, x: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(d_cont, d_cat) of every row of X from x (PSO paper Eq. 9 and 11)."""
        n_cont, n_cat = int(self.cont_.sum()), int((~self.cont_).sum())
        D = deltas(self.raws_, x, X)  # |dx| / R for numbers, 1[changed] for the others
        cont = np.abs(X[:, self.cols_] - x[self.cols_]) / self.mad_
        d_cont = cont[:, self.cont_].sum(axis=1) / n_cont if n_cont else np.zeros(len(X))
        d_cat = D[:, ~self.cont_].sum(axis=1) / n_cat if n_cat else np.zeros(len(X))
        return d_cont, d_cat

    def violations(self, x: np.ndarray, X: np.ndarray) -> np.ndarray:
        """(n,) bool: the row breaks the schema (range, integrality, one-hot), a PLAF rule or one of the
        world's rules (the shared checker)."""
        schema = self.world_.schema
        X = np.atleast_2d(np.asarray(X, float))
        lo, hi = schema.bounds()
        bad = ~np.isfinite(X).all(axis=1) | ((X < lo) | (X > hi)).any(axis=1)
        integral = np.array([f.integer or f.kind in ("binary", "ordinal", "categorical") for f in schema.features])
        bad |= (integral & (X != np.round(X))).any(axis=1)
        for r in self.raws_:
            if r.kind == "group":
                block = X[:, list(r.columns)]
                bad |= (block.sum(axis=1) != 1) | ~np.isin(block, (0.0, 1.0)).all(axis=1)
        bad |= self.program_.ground(x).violations(X) > 0
        if self.rules_ is not None and len(X):
            bad |= ~self.rules_.holds(x, np.where(np.isfinite(X), X, 0.0))
        return bad

    # ------------------------------------------------------------------------------ scoring

    def score(self, x: np.ndarray, recourses: Sequence[Recourse], *, seconds: float | None = None,
              cpu_seconds: float | None = None, model_calls: int | None = None) -> dict[str, Any]:
        """The metrics of one agent's answer (a list of Recourse, best first, as solvers return)."""
        x = np.asarray(x, float)
        rows = [np.asarray(r.final_state, float) for r in recourses if r.found and r.final_state is not None]
        X = np.array(rows).reshape(len(rows), len(x))
        if len(X):
            _, first = np.unique(X, axis=0, return_index=True)
            X = X[np.sort(first)]
        bad = self.violations(x, X) if len(X) else np.zeros(0, bool)
        accepted = self.world_.accepts(X) if len(X) else np.zeros(0, bool)
        ok = accepted & ~bad
        kept = accepted  # validity: accepted, and keeping the world's rules
        if self.rules_ is not None and len(X):
            kept = accepted & self.rules_.holds(x, np.where(np.isfinite(X), X, 0.0))
        V = X[ok]
        if model_calls is None:
            model_calls = next((r.extra.get("model_calls") for r in recourses if "model_calls" in r.extra), None)
        out: dict[str, Any] = {
            "returned": len(X), "valid": int(ok.sum()), "validity": float(kept.mean()) if len(X) else 0.0,
            "found": bool(ok.any()), "coverage": float(ok.sum() >= int(self.n_diverse)),
            "violations": int(bad.sum()), "seconds": seconds, "cpu_seconds": cpu_seconds, "model_calls": model_calls,
            "distance": None, "distance_accepted": None, "changed": None, "changed_mean": None, "proximity": None, "proximity_cat": None,
            "sparsity": None, "diversity": None, "norm_diversity": None,
        }
        if accepted.any():
            out["distance_accepted"] = float(self.distance(x, X[accepted]).min())
        if not len(V):
            return out
        D = deltas(self.raws_, x, V)
        dist = self.distance(x, V)
        changed = (D > 0).sum(axis=1)
        best = int(np.argmin(dist))
        d_cont, d_cat = self._split(x, V)
        out.update(distance=float(dist[best]), changed=int(changed[best]), changed_mean=float(changed.mean()),
                   proximity=float(d_cont.mean()), proximity_cat=float(d_cat.mean()),
                   sparsity=float((changed / len(self.raws_)).mean()))
        if len(V) >= 2:
            i, j = np.triu_indices(len(V), 1)
            pc, pk = np.zeros(len(i)), np.zeros(len(i))
            for n, (a, b) in enumerate(zip(i, j, strict=True)):
                c, k = self._split(V[a], V[b][None])
                pc[n], pk[n] = c[0], k[0]
            pair = pc + pk
            prox = d_cont + d_cat
            denom = prox[i] + prox[j]
            out["diversity"] = float(pair.mean())
            out["norm_diversity"] = float(np.mean(np.where(denom > 0, pair / np.where(denom > 0, denom, 1), 0.0)))
        return out


_MEANS = ("validity", "found", "coverage", "distance", "changed", "changed_mean", "proximity", "proximity_cat",
          "sparsity", "diversity", "norm_diversity", "model_calls", "model_rows", "seconds", "cpu_seconds", "returned",
          "valid", "distance_accepted")


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over agents of every metric (agents without a value are left out of that mean)."""
    out: dict[str, Any] = {"agents": len(rows), "violations": int(sum(r["violations"] for r in rows)),
                           "valid_count": int(sum(bool(r.get("found")) for r in rows)),
                           "accepted_count": int(sum(r.get("distance_accepted") is not None for r in rows))}
    out["valid_share"] = out["valid_count"] / len(rows) if rows else None
    for key in _MEANS:
        vals = [float(r[key]) for r in rows if r.get(key) is not None]
        out[key] = float(np.mean(vals)) if vals else None
    for key in ("seconds", "cpu_seconds"):
        secs = [r[key] for r in rows if r.get(key) is not None]
        out[f"{key}_max"] = float(np.max(secs)) if secs else None
    return out


def gap_summary(distance: Sequence[float | None], reference: Sequence[float | None], *, rel_tol: float = 0.01,
                abs_tol: float = 1e-9) -> dict[str, Any]:
    """How a heuristic's distances compare with certified optima (agents where both exist).

    ``optimal``: share with d <= d* (1 + rel_tol) + abs_tol; ``gap``: quantiles of (d - d*) / d*;
    ``missing``: agents where the reference has an answer and the method none.
    """
    pairs = [(float(d), float(r)) for d, r in zip(distance, reference, strict=True) if d is not None and r is not None]
    missing = sum(1 for d, r in zip(distance, reference, strict=True) if d is None and r is not None)
    if not pairs:
        return {"agents": 0, "missing": missing, "optimal": None}
    d, r = np.array(pairs).T
    gap = (d - r) / np.where(r > 0, r, 1.0)
    q = np.quantile(gap, [0.5, 0.9, 0.99, 1.0])
    return {"agents": len(pairs), "missing": missing, "rel_tol": rel_tol,
            "optimal": float(np.mean(d <= r * (1 + rel_tol) + abs_tol)),
            "gap_mean": float(gap.mean()),
            "gap_median": float(q[0]), "gap_p90": float(q[1]), "gap_p99": float(q[2]), "gap_max": float(q[3]),
            "worse_10pct": float(np.mean(gap > 0.10)), "better": float(np.mean(d < r - abs_tol))}


def ratio_summary(distance: Sequence[float | None], reference: Sequence[float | None], *,
                  rel_tol: float = 0.01) -> dict[str, Any]:
    """Distance over a certified optimum, per agent where both exist: median, mean, p90 and the share
    within ``rel_tol`` of it (``within``); ``compared``: agents with both distances."""
    pairs = [(float(d), float(r)) for d, r in zip(distance, reference, strict=True) if d is not None and r is not None]
    if not pairs:
        return {"compared": 0, "ratio_median": None, "ratio_mean": None, "ratio_p90": None, "within": None}
    d, r = np.array(pairs).T
    ratio = np.where(r > 0, d / np.where(r > 0, r, 1.0), np.where(d > 0, np.inf, 1.0))
    return {"compared": len(pairs), "ratio_median": float(np.median(ratio)), "ratio_mean": float(np.mean(ratio)),
            "ratio_p90": float(np.quantile(ratio, 0.9)), "within": float(np.mean(d <= r * (1 + rel_tol) + 1e-12))}


def dominates(ours: dict[str, Any], peer: dict[str, Any], *, strict_distance: bool = False) -> bool:
    """Whether summary ``ours`` dominates summary ``peer`` (both from ``summarize`` + ``ratio_summary``), Pareto:
    0 constraint violations, no worse on each of the share of agents with a valid answer, the median distance
    ratio (a peer without one counts as infinitely far) and the mean seconds per agent, and strictly better on
    at least one. ``strict_distance``: the median ratio must be strictly smaller (impossible against a peer
    whose median answer is already optimal, ratio 1)."""
    if ours.get("violations", 1) != 0 or ours.get("ratio_median") is None or ours.get("seconds") is None:
        return False
    inf = float("inf")
    o_valid, p_valid = ours.get("valid_share") or 0.0, peer.get("valid_share") or 0.0
    o_ratio = ours["ratio_median"]
    p_ratio = inf if peer.get("ratio_median") is None else peer["ratio_median"]
    o_sec, p_sec = ours["seconds"], inf if peer.get("seconds") is None else peer["seconds"]
    if o_valid < p_valid or o_ratio > p_ratio or o_sec > p_sec:
        return False
    if strict_distance:
        return o_ratio < p_ratio
    return o_valid > p_valid or o_ratio < p_ratio or o_sec < p_sec


class Counted:
    """A classifier's ``predict``/``predict_proba``/``score`` with its calls and rows counted
    (attributes forwarded, so the generators still see a white box's ``exact``)."""

    def __init__(self, model: Any) -> None:
        self.model, self.calls, self.rows = model, 0, 0

    def _count(self, X: np.ndarray) -> None:
        self.calls += 1
        self.rows += len(np.atleast_2d(X))

    def predict(self, X: np.ndarray) -> np.ndarray:
        self._count(X)
        return self.model.predict(X)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        self._count(X)
        return self.model.predict_proba(X)

    def score(self, X: np.ndarray) -> np.ndarray:
        self._count(X)
        return self.model.score(X)

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """A tree ensemble's leaves of each row: a query of the model too, counted as one."""
        self._count(X)
        return self.model.leaves(X)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.model, name)
        if name == "score_variants":  # rows described as variants of base rows: one query of len(index) rows
            def counted(base: np.ndarray, index: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> np.ndarray:
                self.calls += 1
                self.rows += len(index)
                return attr(base, index, cols, vals)

            return counted
        return attr
