"""Values a person can act on: counterfactuals rounded to each feature's resolution, re-verified.

A generator's or GeCo's counterfactual lies in the encoded space, where a real feature carries
float artefacts (Adult: ``capital-gain`` from 0 to ``5095.500244140626``). Nobody can act on that.
:class:`Rounder` snaps every *changed* number to its feature's **resolution**:

- an ``integer`` feature: 1 (the service's check already holds answers to whole numbers);
- a ``real`` feature: the coarsest of 1, 0.1, 0.01, ... (``MAX_DECIMALS`` places) on which every
  value of the data lies -- money kept in whole units gets 1, money kept in cents 0.01; a feature
  whose data has no such grid (a measurement) is left as it is.

Which way to round: each off-grid changed value has two grid neighbours. Every combination of
them over the changed features (at most ``MAX_COMBOS``; beyond, the three uniform ones: all away
from the record, all nearest, all towards it) is **re-verified** by the caller's check (the
service's :meth:`~serving.tabular.TabularService.verify`: the model accepts, no constraint broken),
and the accepted one with the smallest distance is kept. A neighbour equal to the record's own
value, or outside the feature's bounds, is not a candidate: the rounded answer changes exactly the
features the answer changed (its diversity is kept). When no combination verifies, the answer is
kept unrounded (still verified) and :attr:`Rounder.unrounded` counts it.

:func:`round_answers` applies this to a tabular service's answers and their alternatives; the
service calls it where it turns answers into JSON, so the API, the offline files and the page
show the same rounded values. A changed distance drops MACE's ``optimal`` (its certificate holds
for the point it proved, not for the rounded one).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from serving.records import RecordCodec

log = logging.getLogger("recourse_gym.serve")

MAX_DECIMALS = 6  # the finest resolution inferred for a real feature: 1e-6
MAX_COMBOS = 256  # rounding combinations tried per answer before falling back to the uniform ones
_TOL = 1e-9  # a value within this many steps of a grid point is on the grid

Verify = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (X, CF) -> per row: accepted and plausible


def resolution(values: np.ndarray, max_decimals: int = MAX_DECIMALS) -> int | None:
    """The fewest decimal places (0 to ``max_decimals``) that hold every finite value of
    ``values`` exactly, or None where none do (no grid: a measured quantity)."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    for k in range(max_decimals + 1):
        step = 10.0 ** -k
        off = np.abs(v - np.round(v / step) * step)  # in raw units; float32 data is off by ~1e-7 relative
        if np.all(off <= np.minimum(1e-7 * np.maximum(1.0, np.abs(v)), 0.1 * step)):
            return k
    return None


class Rounder:
    """Rounds counterfactuals of one codec to the resolution of each numeric column."""

    def __init__(self, codec: RecordCodec, decimals: Sequence[int | None]):
        """``decimals``: per encoded column, the decimal places of its grid (None: no rounding;
        category, ordinal and binary columns are codes and never rounded)."""
        if len(decimals) != codec.n_columns:
            raise ValueError(f"decimals: expected {codec.n_columns} columns, got {len(decimals)}")
        self.codec = codec
        numeric = ~codec.codes
        self.decimals = [d if numeric[j] else None for j, d in enumerate(decimals)]
        self.columns = np.array([j for j, d in enumerate(self.decimals) if d is not None], np.int64)
        self.step = np.array([10.0 ** -self.decimals[j] for j in self.columns])
        self.unrounded = 0  # answers kept unrounded because no rounding of them verified
        self._lock = threading.Lock()

    @classmethod
    def from_rows(cls, codec: RecordCodec, rows: np.ndarray | None, *,
                  max_decimals: int = MAX_DECIMALS) -> Rounder:
        """Integer columns on the grid of 1; real columns on the grid their values in ``rows``
        (encoded rows of the data set) lie on (none where ``rows`` is None)."""
        decimals: list[int | None] = []
        for j, f in enumerate(codec.schema.features):
            if codec.codes[j]:
                decimals.append(None)
            elif f.integer:
                decimals.append(0)
            else:
                decimals.append(None if rows is None else resolution(np.asarray(rows)[:, j], max_decimals))
        return cls(codec, decimals)

    def resolutions(self) -> dict[str, float]:
        """Raw feature name -> its grid step (the numbers that are rounded)."""
        names = self.codec.schema.names
        return {names[j]: float(s) for j, s in zip(self.columns, self.step, strict=True)}

    def _candidates(self, x: np.ndarray, cf: np.ndarray) -> list[tuple[int, list[float]]]:
        """Per off-grid changed column: its grid neighbours, away from the record first."""
        out = []
        lo_b, hi_b = self.codec.lower, self.codec.upper
        for j, s, k in zip(self.columns, self.step, (self.decimals[c] for c in self.columns), strict=True):
            c = cf[j]
            if abs(c - x[j]) <= 1e-12:
                continue
            q = c / s
            if abs(q - round(q)) <= _TOL * max(1.0, abs(q)):
                snapped = round(round(q) * s, k)
                if snapped != c:  # on the grid up to float noise: write it cleanly
                    out.append((int(j), [snapped]))
                continue
            down, up = round(math.floor(q) * s, k), round(math.ceil(q) * s, k)
            pair = [up, down] if c > x[j] else [down, up]  # away from the record first
            keep = [v for v in pair if lo_b[j] - 1e-9 <= v <= hi_b[j] + 1e-9 and abs(v - x[j]) > 1e-12]
            out.append((int(j), keep))
        return out

    def round(self, X: np.ndarray, CF: np.ndarray, verify: Verify) -> tuple[np.ndarray, np.ndarray]:
        """``(CF rounded, held)``: per row, the verified rounding with the smallest distance, or the
        row unchanged where none verifies (``held`` False). Rows with a NaN are left alone."""
        X, CF = np.atleast_2d(np.asarray(X, float)), np.atleast_2d(np.asarray(CF, float))
        out, held = CF.copy(), np.ones(len(CF), bool)
        owners: list[int] = []
        rows: list[np.ndarray] = []
        for i in range(len(CF)):
            if not np.isfinite(CF[i]).all():
                continue
            cands = self._candidates(X[i], CF[i])
            if not cands:
                continue
            if any(not vals for _, vals in cands):
                held[i] = False
                continue
            cols = [j for j, _ in cands]
            n = math.prod(len(v) for _, v in cands)
            if n <= MAX_COMBOS:
                combos: Any = itertools.product(*(v for _, v in cands))
            else:  # all away, all nearest, all towards the record
                near = [min(v, key=lambda t, j=j: abs(t - CF[i, j])) for j, v in cands]
                combos = [[v[0] for _, v in cands], near, [v[-1] for _, v in cands]]
            for combo in combos:
                r = CF[i].copy()
                r[cols] = combo
                rows.append(r)
                owners.append(i)
        if not rows:
            return out, held
        R, own = np.vstack(rows), np.asarray(owners)
        ok = np.asarray(verify(X[own], R), bool)
        dist = self.codec.distance(X[own], R)
        for i in np.unique(own):
            mine = np.flatnonzero((own == i) & ok)
            if len(mine):
                out[i] = R[mine[np.argmin(dist[mine])]]
            else:
                held[i] = False
        if not held.all():
            with self._lock:
                self.unrounded += int((~held).sum())
        return out, held


_ROUNDERS: weakref.WeakKeyDictionary[Any, Rounder] = weakref.WeakKeyDictionary()
_ROUNDERS_LOCK = threading.Lock()


def training_rows(svc: Any) -> np.ndarray | None:
    """The encoded training rows of a tabular service's data set (None where they cannot be loaded)."""
    run = getattr(svc, "run", None)
    try:
        if hasattr(run, "domain_rows"):
            return np.asarray(run.domain_rows(), float)
        from data_gen.loaders import load_data

        tab = getattr(svc, "tab", {}) or {}
        data = load_data(tab["dataset"], seed=int(tab.get("seed", 0)))
        if data.encoder != svc.world.encoder:
            raise ValueError("the data's encoder differs from the run's")
        return data.X_train
    except Exception as err:  # real features then stay unrounded; integers are whole anyway
        log.warning("rounding: cannot load the run's training data (%s); real features are not rounded", err)
        return None


def rounder_for(svc: Any) -> Rounder:
    """The service's :class:`Rounder` (built once; the data set's training rows are read only
    where a real feature needs its resolution)."""
    with _ROUNDERS_LOCK:
        r = _ROUNDERS.get(svc)
        if r is None:
            codec = svc.codec
            real = any(not codec.codes[j] and not f.integer for j, f in enumerate(codec.schema.features))
            r = _ROUNDERS[svc] = Rounder.from_rows(codec, training_rows(svc) if real else None)
        return r


def round_answers(svc: Any, X: np.ndarray, answers: Sequence[Any]) -> list[Any]:
    """The answers of a tabular service (``serving.tabular.Answer``) with their counterfactual and
    alternatives rounded (:meth:`Rounder.round`, re-verified by ``svc.verify``) and their distances
    recomputed; the inputs are not modified."""
    rounder = rounder_for(svc)
    if not len(rounder.columns):
        return list(answers)
    pairs: list[tuple[int, int]] = []  # (answer, -1 for the answer itself or the alternative's index)
    xs, cfs = [], []
    for i, a in enumerate(answers):
        if a.status != "ok" or a.cf is None:
            continue
        for k, cf in [(-1, a.cf), *((k, alt[0]) for k, alt in enumerate(a.alternatives))]:
            pairs.append((i, k))
            xs.append(X[i])
            cfs.append(cf)
    if not pairs:
        return list(answers)
    Xp, CF = np.vstack(xs), np.vstack(cfs)
    R, _ = rounder.round(Xp, CF, svc.verify)
    moved = np.flatnonzero(np.any(R != CF, axis=1))
    if not len(moved):
        return list(answers)
    dist = svc.codec.distance(Xp[moved], R[moved])
    out = list(answers)
    alts = {i: list(a.alternatives) for i, a in enumerate(answers)}
    for m, d in zip(moved, dist, strict=True):
        i, k = pairs[m]
        if k < 0:
            a = out[i]
            out[i] = replace(a, cf=R[m], distance=float(d), optimal=None if a.optimal else a.optimal)
        else:
            alts[i][k] = (R[m], float(d), *alts[i][k][2:])
    for i in {pairs[m][0] for m in moved}:
        out[i] = replace(out[i], alternatives=alts[i])
    return out
