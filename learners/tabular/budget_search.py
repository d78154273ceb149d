"""A search that sees the model only through ``predict_proba``, within R round trips and N rows per answer
(issue 56). A heuristic: its answers carry no certificate.

Given K proposed counterfactuals per agent (a network's heads, or the labels' averages: the caller's
idea), ``budget_search`` spends its budget in rounds, every agent of the batch in the same call:

1. **proposals**: each proposal on a ray from the agent (its numeric changes times ``scales``; its
   discrete changes as proposed) and, where a value vocabulary is given (the values MACE's answers move
   each numeric column to, learned from the labels: on a forest they sit just past its splits, which a
   black box does not show), the proposal with each numeric change snapped to the nearest vocabulary
   value at least as far. Rows are projected onto the agent's box and rows that break a rule of the
   world (known, no model call) are dropped. Where the round has ``SCREEN_MIN_ROWS`` rows or more, a share
   goes to ``screens``: one feature at a time (each numeric column to fractions of its room either way
   and to its vocabulary values nearest the agent, each other category, each flip), which tell which
   single features flip the model for this agent. One call; the nearest accepted row per agent is its answer.
2. **refinement rounds** (while the budget lasts): from each agent's accepted rows (the nearest of each
   changed set first, as many as the round's rows allow), every move that shortens it (a changed feature
   back to the agent's value; a numeric change shrunk to fractions of itself and to the vocabulary values
   between; two changes shrunk together; the whole numeric change scaled toward the agent; an integer
   column giving back a step or two while another column moves on by the distance that frees: a trade),
   ``rows`` of them spread from the nearest to the mildest, in one call; the nearest accepted replaces
   the answer. On a model in steps, with a round to follow, the moves also include ``step_trades``: one changed
   column back a few of the vocabulary's values while another moves on a few (an answer one feature short
   of the optimum's set).

Every answer was itself accepted by a model call (no value is recomputed after its check) and lies in the
agent's box, keeping the world's rules. ``rows_per_round`` splits the per-agent rows between rounds.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.black_box import Budget
from learners.tabular.corners import nearest_corners
from learners.tabular.first_round import (  # noqa: F401 (LEAD_LADDER, SCALES: read by the proposer and the tests)
    EXTRA_SHARE,
    LEAD_LADDER,
    SCALES,
    _first_round_with_surrogate,
    _round_one,
    screens,
)
from learners.tabular.geometry import WorldGeometry
from learners.tabular.lifts import LIFT_SHARE, lifted, near_misses, one_more_feature
from learners.tabular.rows import compact, fresh, nan_as_zero, nearest_first, repeats, row_keys
from learners.tabular.rows import projected as _projected
from learners.tabular.slides import slides
from learners.tabular.step_trades import step_trades
from learners.tabular.steps import corner_grid, first_vocab_values

FAR = (3.0, 5.0, 8.0, 12.0, 20.0, 40.0, 100.0)  # round one's rays (first_round.SCALES) further in a later round, for an agent none of whose rows was accepted
# a numeric change shrunk to these fractions of itself (coarse far from the answer, fine near it)
FRACTIONS = tuple(np.round(np.concatenate([np.linspace(0.05, 0.75, 8), 1 - np.geomspace(0.2, 0.004, 12)]), 6))
RAY = tuple(np.round(1 - np.geomspace(0.6, 0.002, 20), 6))  # the whole numeric change scaled toward the agent
PAIR_FRACTIONS = (0.0, 0.3, 0.6, 0.8, 0.9, 1.0)  # the grid of a pair of numeric changes (1.0: as it is)
SPARE_DONORS = 64  # the training neighbours' transplants offered to a round's unused rows
CORNERS = 1000  # at most this many nearest corners per agent offered to a round's unused rows
BRACKET_ROWS = 512  # the latest rejected rows per agent that bracket the starts' rays (memory: N x T x rows x D)
STARTS = 3  # distinct accepted rows per agent the refinement shortens (the nearest of each changed set first)
MAX_STARTS = 6  # and up to this many where a round has the rows
START_ROWS = 24  # rows a round needs per start before it takes one more
MOVE_BLOCK = 64  # agents whose shortening moves are built at a time (memory)
AHEAD_AGENTS = 64  # a batch this small gets round two's rows of its own built while round one's call waits
VOCAB_STEPS = 8  # vocabulary values between the agent and the answer tried per numeric column
# on a model that answers in steps (``steps.step_share``) the shrinks go to the vocabulary's values (a forest's
# splits) more than to fractions: most fractions of a change land in the cell the answer is in already
STEP_VOCAB_STEPS = 24
STEP_FRACTIONS = (0.5, 0.8, 0.95)
STEP_FLIPS = 2  # and a changed column goes to this many vocabulary values on the other side of the agent
TRADE_BACKS = (1.0, 2.0)  # integer steps a changed integer column gives back in a trade
TRADE_SHARES = (0.125, 0.25, 0.5, 0.75, 1.0)  # of the room a give-back frees, the partner's move
SCREEN_SHARE = 0.3  # of the first round's rows, at most this share for the screens (one feature at a time)
SCREEN_MIN_ROWS = 512  # only where the first round has this many rows: below, the proposals need them all
ADD_SHARE = 0.25  # of a refinement round's rows that a later round can shrink, the share for ``_additions``
ADD_FAR = 1.5  # additions up to this multiple of the best answer's distance (farther than it: a new set)
ADD_SHRINK = (0.5, 0.7, 0.85, 0.95)  # the answer's numeric changes scaled toward the agent when a feature is added


@dataclass
class SearchResult:
    """The answers of ``budget_search`` and what they cost."""

    CF: np.ndarray  # (N, D) NaN rows where no row was accepted
    distance: np.ndarray  # (N,) inf where none
    found: np.ndarray  # (N,) bool
    calls: int  # round trips made (one per round, for the whole batch)
    rows: np.ndarray  # (N,) rows scored per agent
    alternatives: np.ndarray | None = None  # (N, STARTS - 1, D) the next distinct accepted rows (NaN padded)


def value_vocabulary(geo: WorldGeometry, X: np.ndarray, CF: np.ndarray, cap: int = 256) -> list[np.ndarray]:
    """Per column, the sorted values the labels' answers moved a numeric column to (at most ``cap``, by
    frequency); empty for other columns."""
    out = []
    for c in range(X.shape[1]):
        if not geo.numeric[c]:
            out.append(np.zeros(0))
            continue
        moved = CF[:, c][np.abs(CF[:, c] - X[:, c]) > 1e-12]
        vals, counts = np.unique(moved, return_counts=True)
        if len(vals) > cap:
            vals = vals[np.argsort(-counts, kind="stable")[:cap]]
        out.append(np.sort(vals))
    return out


def _accept(model, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, threshold: float
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, Q) acceptance of the finite rows of ``C`` (N, Q, D) in one call, rows scored per agent, and (N, Q)
    the model's probabilities (NaN for the rows not scored)."""
    N, Q, D = C.shape
    live = ~np.isnan(C).any(-1)
    proba = np.full((N, Q), np.nan)
    if live.any():
        proba[live] = model.predict_proba(C[live])  # (n,) P(accept): one round trip
    return proba > threshold, live.sum(1), proba


def _moves(geo: WorldGeometry, X: np.ndarray, S: np.ndarray, vocab: list[np.ndarray] | None, steps: bool = False,
           lo: np.ndarray | None = None, trades: bool = False) -> np.ndarray:
    """(N, Q, D) rows that shorten each agent's accepted rows ``S`` (N, T, D) by one move (none from NaN rows);
    ``lo`` (N, T): the bracket of each start's ray (``_brackets``)."""
    N, T, D = S.shape
    # every start at once (start-major per agent): one call, not T, where a request is one agent (latency);
    # a NaN start (an agent with fewer answers) has no moves, so only the live ones are built
    live = np.flatnonzero(~np.isnan(S).any(-1).reshape(N * T))
    if not len(live):
        return np.full((N, T, D), np.nan)
    M1 = _moves_one(geo, np.repeat(X, T, axis=0)[live], S.reshape(N * T, D)[live], vocab, steps,
                    None if lo is None else lo.reshape(N * T)[live], trades)
    M = np.full((N * T, M1.shape[1], D), np.nan)
    M[live] = M1
    return M.reshape(N, T * M1.shape[1], D)


def _brackets(geo: WorldGeometry, X: np.ndarray, S: np.ndarray, R: np.ndarray) -> np.ndarray:
    """(N, T) for each start ``S`` (N, T, D), the largest fraction f < 1 of its numeric change at which a
    rejected row of ``R`` (N, Q, D) lies on its ray (x + f (s - x), its other columns as s's; integer
    columns within rounding), 0 where none: on a smooth model the boundary lies between f and 1."""
    if not R.shape[1]:
        return np.zeros(S.shape[:2])
    num = geo.numeric
    dS = nan_as_zero(S - X[:, None, :])  # (N, T, D)
    real = num & ~geo.rounded
    # f is read off one column: the largest real change, else the integer change of the most steps (its
    # rounding error, 0.5 / steps, the smallest)
    key = np.where((real & (dS != 0)).any(-1), np.argmax(np.where(real, np.abs(dS) / geo.span, -1.0), axis=-1),
                   np.argmax(np.where(num, np.abs(dS), -1.0), axis=-1))
    k = np.take_along_axis(dS, key[..., None], -1)[..., 0]  # (N, T)
    dR = R - X[:, None, :]  # (N, Q, D), NaN rows unscored
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.take_along_axis(dR[:, None], key[:, :, None, None], -1)[..., 0] / k[..., None]  # (N, T, Q)
        # only the (start, row) pairs whose key column puts the row inside the ray are checked column by column
        n, t, q = np.nonzero((k[..., None] != 0) & (f > 0) & (f < 1 - 1e-9))
        s, r, f = dS[n, t], dR[n, q], f[n, t, q]  # (L, D), (L, D), (L,)
        # a rounded key column reads f to within 0.5 / |k|, which every other column's check allows for
        slack = np.where(geo.rounded[key[n, t]], 0.5 / np.abs(k[n, t]), 0.0)[:, None] * np.abs(s)
        resid = np.abs(r - f[:, None] * s)
        tol = np.where(geo.rounded, 0.5, 0.0) + 1e-9 * (1.0 + np.abs(s)) + slack
        on = np.where(num, resid <= tol, np.abs(r - s) <= 1e-12).all(-1)
    out = np.zeros(S.shape[:2])
    np.maximum.at(out, (n[on], t[on]), f[on])  # the largest such f per start (f > 0: 0 where none)
    return out


def _moves_one(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray] | None, steps: bool = False,
               lo: np.ndarray | None = None, trades: bool = False) -> np.ndarray:
    """(N, Q, D) rows that shorten each agent's answer ``B`` (N, D) by one move (NaN rows where B is NaN);
    where ``lo`` (N,) > 0 (a rejected row on the answer's ray), the whole change's ray is scaled inside
    (lo, 1) instead of ``RAY``."""
    N, D = X.shape
    parts = []
    cols = geo.raw_columns()
    for j in range(geo.n_raw):  # each raw feature back to the agent's value
        m = cols[j][cols[j] >= 0]
        R = B.copy()
        R[:, m] = X[:, m]
        parts.append(R[:, None])
    num = np.flatnonzero(geo.numeric)
    f = np.asarray(STEP_FRACTIONS if steps else FRACTIONS)
    V = STEP_VOCAB_STEPS if steps else VOCAB_STEPS
    F = first_vocab_values(geo, X, vocab, V) if vocab is not None else None
    for c in num:  # each numeric change shrunk
        R = np.repeat(B[:, None], len(f), axis=1)
        R[:, :, c] = X[:, None, c] + f[None, :] * (B[:, None, c] - X[:, None, c])
        parts.append(R)
        if F is not None and len(vocab[c]):  # the vocabulary values between the agent and the answer, nearest to the agent first
            b = B[:, c]
            up = b > X[:, c]
            vals = np.where(up[:, None], F[0, :, c], F[1, :, c])
            inside = ~np.isnan(vals) & np.where(up[:, None], vals < b[:, None], vals > b[:, None])
            R = np.repeat(B[:, None], V, axis=1)
            R[:, :, c] = np.where(inside, vals, np.nan)
            parts.append(R)
            if steps and STEP_FLIPS:  # the change to the other side of the agent (a forest need not be monotone)
                moved = np.abs(b - X[:, c]) > 1e-12
                R = np.repeat(B[:, None], STEP_FLIPS, axis=1)
                R[:, :, c] = np.where(moved[:, None], np.where(up[:, None], F[1, :, c, :STEP_FLIPS], F[0, :, c, :STEP_FLIPS]), np.nan)
                parts.append(R)
    g = np.asarray(PAIR_FRACTIONS)  # two numeric changes shrunk together, on a grid (an optimum trading them)
    changed = np.abs(nan_as_zero(B) - X) > 1e-12
    for i, c1 in enumerate(num):
        for c2 in num[i + 1:]:
            both = changed[:, c1] & changed[:, c2]
            if not both.any():
                continue
            R = np.repeat(B[:, None], len(g) ** 2, axis=1)
            f1, f2 = np.repeat(g, len(g)), np.tile(g, len(g))
            R[:, :, c1] = X[:, None, c1] + f1[None, :] * (B[:, None, c1] - X[:, None, c1])
            R[:, :, c2] = X[:, None, c2] + f2[None, :] * (B[:, None, c2] - X[:, None, c2])
            R[~both] = np.nan
            parts.append(R)
    parts += _trades(geo, X, B, changed)
    if steps and trades and vocab is not None:  # in steps, a round to follow: along the splits (step_trades.py)
        parts.append(step_trades(geo, X, B, vocab))
    if not steps:  # a smooth boundary: less of one real change, more of another
        parts.append(slides(geo, X, B))
    t = np.broadcast_to(np.asarray(RAY), (N, len(RAY)))
    if lo is not None and not steps:  # a bracket known: evenly inside it (1% of the change wants a fine grid)
        inner = lo[:, None] + (1 - lo[:, None]) * np.arange(1, len(RAY) + 1)[None, :] / (len(RAY) + 1)
        t = np.where(lo[:, None] > 0, inner, t)
    R = np.repeat(B[:, None], t.shape[1], axis=1)
    R[:, :, num] = X[:, None, num] + t[:, :, None] * (B[:, None, num] - X[:, None, num])
    parts.append(R)
    return _projected(geo, X, parts)


def _trades(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, changed: np.ndarray) -> list[np.ndarray]:
    """(N, Q, D) rows per changed integer column: it gives back ``TRADE_BACKS`` steps toward the agent and
    another numeric column moves on, either way it may, by ``TRADE_SHARES`` of the distance that frees (the
    optimum that takes one step less of an integer feature and tips over with a little of another). All
    (column, steps, partner, direction) combinations at once: one agent's moves are built per request."""
    num = np.flatnonzero(geo.numeric & ~geo.fixed)
    ints = num[geo.rounded[num]]
    if not len(ints) or len(num) < 2:
        return []
    Bn = nan_as_zero(B)
    c, k = np.repeat(ints, len(TRADE_BACKS)), np.tile(np.asarray(TRADE_BACKS), len(ints))
    live = changed[:, c] & (np.abs(Bn[:, c] - X[:, c]) > k - 1e-9)
    keep = np.flatnonzero(live.any(0))  # the (column, steps) some agent can give back
    if not len(keep):
        return []
    partners = [np.repeat(num[num != c[i]], 2) for i in keep]  # each other column, up then down
    size = np.array([len(p) for p in partners])
    j = np.concatenate(partners)
    sgn = np.tile([1.0, -1.0], len(j) // 2)
    c, k, live = np.repeat(c[keep], size), np.repeat(k[keep], size), np.repeat(live[:, keep], size, axis=1)
    lo, hi = geo.box(X)
    cost, raw = geo.direction_costs, geo.raw_of_column
    g = Bn[:, c] - X[:, c]  # (N, T) the integer column's change
    freed = k / geo.span[c] * np.where(g < 0, cost[raw[c], 1], cost[raw[c], 0])  # the normalized, weighted change a give-back frees
    w = np.where(sgn > 0, cost[raw[j], 0], cost[raw[j], 1])
    step = np.asarray(TRADE_SHARES)[None, None, :] * (freed / w)[:, :, None] * geo.span[j][None, :, None]  # (N, T, S)
    D = X.shape[1]
    R = np.repeat(np.repeat(B[:, None, None, :], len(c), 1), len(TRADE_SHARES), 2)  # (N, T, S, D)
    n, t = np.arange(len(X))[:, None], np.arange(len(c))[None, :]
    R[n, t, :, c[None, :]] = (B[:, c] - np.sign(g) * k)[:, :, None]
    R[n, t, :, j[None, :]] = B[:, j][:, :, None] + sgn[None, :, None] * step
    bad = ~live | (sgn * (Bn[:, j] - X[:, j]) < -1e-12)  # it changed the other way
    bad |= np.where(sgn > 0, hi[:, j] <= B[:, j], lo[:, j] >= B[:, j])  # no room that way
    R[bad] = np.nan
    return [R.reshape(len(X), -1, D)]


def _additions(geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray] | None,
               Sc: np.ndarray | None = None) -> np.ndarray:
    """(N, Q, D) the answers ``B`` (N, D) with one more raw feature changed (a ``screens`` move of a feature
    ``B`` leaves at the agent's value) and their numeric changes scaled by ``ADD_SHRINK``: a changed set
    that needs a feature the proposals left out is reached by adding it, then shrinking (a later round)."""
    Sc = screens(geo, X, vocab) if Sc is None else Sc
    changed = np.abs(nan_as_zero(B) - X) > 1e-12  # the answer's own changes, before they are scaled
    num = geo.numeric
    out = []
    for t in ADD_SHRINK:
        base = np.array(B, float)
        base[:, num] = X[:, num] + t * (base[:, num] - X[:, num])
        out.append(one_more_feature(X, base, Sc, changed))
    return _projected(geo, X, out)


def _shortening_rows(geo: WorldGeometry, X: np.ndarray, S: np.ndarray, vocab: list[np.ndarray] | None, rows: int,
                     below: np.ndarray, steps: bool = False, rejected: np.ndarray | None = None,
                     caps: np.ndarray | None = None, trades: bool = False) -> np.ndarray:
    """(N, rows, D) ``_nearest_first`` of ``_moves`` from the starts ``S`` (N, T, D), built ``MOVE_BLOCK`` agents
    at a time: the moves of all starts of a large batch would not fit in memory (a few thousand per
    agent), and only ``rows`` per agent survive."""
    out = np.full((len(X), rows, X.shape[1]), np.nan)
    for lo in range(0, len(X), MOVE_BLOCK):
        sl = slice(lo, lo + MOVE_BLOCK)
        lo = None if rejected is None or steps else _brackets(geo, X[sl], S[sl], rejected[sl])
        M = nearest_first(geo, X[sl], _moves(geo, X[sl], S[sl], vocab, steps, lo, trades), rows, below[sl],
                           None if caps is None else caps[sl])
        out[sl, : M.shape[1]] = M
    return out


def _starts(C: np.ndarray, d: np.ndarray, k: int, X: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(N, k, D) each agent's ``k`` nearest distinct accepted rows of ``C`` (N, Q, D) and (N, k) their
    distances (inf, rows NaN, where there are fewer). With the agents ``X``, the nearest row of each
    changed set comes first (nearest first), then the next nearest rows: a farther answer that changes
    other features may shrink below the nearest one, which the shrinking moves of one set never reach."""
    order = np.argsort(d, axis=1, kind="stable")
    d = np.take_along_axis(d, order, 1)
    C = np.take_along_axis(C, order[:, :, None], 1)
    dup = np.zeros_like(d, bool)
    dup[:, 1:] = (d[:, 1:] == d[:, :-1]) & np.isfinite(d[:, 1:])  # equal distance: most likely the same row
    d = np.where(dup, np.inf, d)
    key = d.copy()
    if X is not None and C.shape[1] > 1:  # a row whose changed set a nearer row has ranks after every first
        moved = np.packbits(np.abs(nan_as_zero(C) - X[:, None, :]) > 1e-12, axis=-1)  # (N, Q, bytes)
        width = -(-moved.shape[-1] // 8) * 8  # whole 8-byte words
        moved = np.pad(moved, ((0, 0), (0, 0), (0, width - moved.shape[-1])))
        # the rows come nearest first, so each (agent, set)'s first is its nearest
        repeat = repeats(np.ascontiguousarray(moved).view(np.dtype((np.void, width)))[..., 0])
        key[repeat & np.isfinite(d)] += 1e6  # after every first of its set, in distance order
    order = np.argsort(key, axis=1, kind="stable")[:, :k]
    d = np.take_along_axis(d, order, 1)
    S = np.take_along_axis(C, order[:, :, None], 1)
    S[~np.isfinite(d)] = np.nan
    if S.shape[1] < k:
        S = np.pad(S, ((0, 0), (0, k - S.shape[1]), (0, 0)), constant_values=np.nan)
        d = np.pad(d, ((0, 0), (0, k - d.shape[1])), constant_values=np.inf)
    return S, d


def _agents_own_rows(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray] | None, corners: int
                     ) -> tuple[np.ndarray, np.ndarray | None]:
    """The rows a later round draws on that depend on the agents alone: their ``screens`` and, with ``corners``
    > 0, their nearest ``corners`` of the vocabulary (``corners.nearest_corners``)."""
    return screens(geo, X, vocab), (nearest_corners(geo, X, vocab, corners)[0] if corners else None)


_AHEAD: dict[int, ThreadPoolExecutor] = {}  # per process id: a forked child has none of its parent's threads
_RUNNING = [0]  # searches in flight in this process (``_counted``)
_RUNNING_LOCK = threading.Lock()


def _counted(search: Callable[..., SearchResult]) -> Callable[..., SearchResult]:
    """``search`` counting itself in ``_RUNNING`` while it runs."""

    @functools.wraps(search)
    def run(*args: Any, **kwargs: Any) -> SearchResult:
        with _RUNNING_LOCK:
            _RUNNING[0] += 1
        try:
            return search(*args, **kwargs)
        finally:
            with _RUNNING_LOCK:
                _RUNNING[0] -= 1

    return run


def _ahead(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray] | None, corners: int) -> Future | None:
    """``_agents_own_rows`` started on a helper thread, to be built while round one's call waits on the model
    (a remote model's round trip: a request's latency is the waits plus what is computed between them); None
    for a batch larger than ``AHEAD_AGENTS`` (memory: they are built a block at a time where needed) and while
    another search runs in the process: then the waits are not idle, and a helper thread only adds switches
    between threads (4 clients at once against a served forest: 32 -> 24-29 answers a second with it)."""
    if len(X) > AHEAD_AGENTS or _RUNNING[0] > 1:
        return None
    pool = _AHEAD.get(os.getpid())
    if pool is None:
        pool = _AHEAD[os.getpid()] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="budget-search-ahead")
    return pool.submit(_agents_own_rows, geo, X, vocab, corners)


@_counted
def budget_search(model, geo: WorldGeometry, X: np.ndarray, P: np.ndarray, budget: Budget, *,
                  vocab: list[np.ndarray] | None = None, threshold: float = 0.5,
                  first_share: float = 0.5, fallback: np.ndarray | None = None, surrogate: Any = None,
                  lead: int = 0, grid_share: float = 0.0, steps: bool = False, donors: Any = None) -> SearchResult:
    """The nearest accepted row per agent found within ``budget`` (per agent) from proposals ``P`` (N, K, D).

    ``model``: anything with ``predict_proba`` (a ``BlackBoxModel`` enforces the budget); ``first_share``:
    the share of the rows the proposals' round takes when there are further rounds; ``fallback`` (N, F, D):
    rows tried, with the proposals pushed further, for the agents none of whose first rows was accepted;
    ``donors(agents, start, count)`` (N', count, D): rows for agents still without an answer in a later round
    (the transplants of their training neighbours ranked ``start`` on), until one is accepted or none is left.
    A first round of ``SCREEN_MIN_ROWS`` rows or more gives a share ``SCREEN_SHARE`` to ``screens``.
    ``surrogate`` (a ``learners.tabular.surrogate.Surrogate``): the first round also builds many more
    candidates (the proposals on ``POOL_SCALES`` rays, the screens) and asks the model about a share
    ``PICK_SHARE`` that ``surrogate.pick`` ranks most likely to be the nearest accepted; the first ``lead``
    proposals (a search's answers on the surrogate) go first on ``LEAD_LADDER``.
    ``grid_share``: the share of round one (without a surrogate) for ``steps.corner_grid``, the proposals'
    changed sets at the vocabulary's values (for a model that answers in steps: ``steps.step_share``).
    A refinement round that a later round follows gives a share ``ADD_SHARE`` of its rows to ``_additions``:
    the best answer with one more feature changed, up to ``ADD_FAR`` times farther; an accepted one is a
    new changed set that the next rounds shrink (German forest at 8 x 2000: .89 -> .94). Rows a round's moves
    leave unused go to the screens and the additions nearer than the answer (a single feature the
    proposals' sets left out, found within the rows already paid for) and, where a later round follows, the first
    ``SPARE_DONORS`` donors nearer than the answer (a neighbour's changed set the proposals lacked). ``steps``: the model answers in steps
    (``steps.step_share``): the shrinks take ``STEP_VOCAB_STEPS`` vocabulary values and ``STEP_FRACTIONS``,
    and a changed column also goes to ``STEP_FLIPS`` vocabulary values on the other side of the agent."""
    X = np.atleast_2d(np.asarray(X, float))
    N, D = X.shape
    rows_left = np.full(N, int(budget.rows))
    first = int(budget.rows) if int(budget.calls) == 1 else max(1, int(round(first_share * int(budget.rows))))
    if surrogate is not None:
        C = _first_round_with_surrogate(geo, X, np.asarray(P, float), vocab, first, fallback, surrogate, lead)
    else:
        n_screen = int(SCREEN_SHARE * first) if first >= SCREEN_MIN_ROWS else 0
        n_grid = int(grid_share * first) if vocab is not None else 0
        C = _round_one(geo, X, np.asarray(P, float), vocab, first - n_screen - n_grid, extra=fallback)
        if n_grid:
            C = np.concatenate([corner_grid(geo, X, np.asarray(P, float), vocab, n_grid), C], axis=1)
        if n_screen:
            C = np.concatenate([C, compact(screens(geo, X, vocab), n_screen)], axis=1)
    C[~geo.keeps(X[:, None, :], C)] = np.nan  # a rule-breaking row is not scored
    C = fresh(C)  # rays, snaps and grids meet: each row once
    n_corners = min(int(budget.rows), CORNERS) if steps and vocab is not None else 0
    ahead = _ahead(geo, X, vocab, n_corners) if int(budget.calls) > 1 else None
    ok, used, proba = _accept(model, geo, X, C, threshold)
    own_Sc, own_corners = ahead.result() if ahead is not None else (None, None)
    calls, rows_left = 1, rows_left - used
    pool_C, pool_d = C, np.where(ok, geo.distance(X[:, None, :], nan_as_zero(C)), np.inf)  # every accepted row
    lifting = steps and int(budget.calls) > 1  # a model in steps: its near misses, lifted by one feature (lifts.py)
    near = near_misses(geo, X, C, proba, ok, pool_d.min(1)) if lifting else None
    # scored and refused, the latest first: the brackets (only the latest BRACKET_ROWS kept: memory)
    recent = compact(np.where((~ok & ~np.isnan(C).any(-1))[..., None], C, np.nan)[:, ::-1], BRACKET_ROWS)
    asked = row_keys(np.where(np.isnan(C).any(-1, keepdims=True), np.nan, C))  # every row scored: never twice
    rounds_left = int(budget.calls) - 1
    tried_far, donor_at = False, np.zeros(N, np.int64)  # donor_at: each agent's next donor rank
    done = np.zeros(N, bool)
    while True:
        cap = rows_left // max(rounds_left, 1)  # this round's rows per agent
        per = int(cap.max())
        # as many starts as each agent's rows allow (a start's moves are about START_ROWS rows), each a changed
        # set; every count here is the agent's own, so an answer does not depend on the rest of the batch
        n_starts = np.maximum(STARTS, np.minimum(MAX_STARTS, cap // START_ROWS))
        last = rounds_left <= 0 or rows_left.max() <= 0
        S, dS = _starts(pool_C, pool_d, STARTS if last else int(n_starts.max()), X)  # the same first STARTS
        dS[np.arange(dS.shape[1])[None, :] >= n_starts[:, None]] = np.inf
        S[~np.isfinite(dS)] = np.nan
        found = np.isfinite(dS[:, 0])
        if last:
            break
        n_add = (ADD_SHARE * cap).astype(np.int64) if rounds_left > 1 else np.zeros(N, np.int64)
        n_lift = (LIFT_SHARE * cap).astype(np.int64) if lifting else np.zeros(N, np.int64)
        M = _shortening_rows(geo, X, S, vocab, per, np.where(found, dS[:, 0], -np.inf), steps,
                             recent, cap - n_add - n_lift, trades=rounds_left > 1)
        if n_lift.any():  # the near misses with one more feature, ahead of the moves (they are few and new)
            L = lifted(geo, X, near[0], own_Sc if own_Sc is not None else lambda a: screens(geo, X[a], vocab), asked,
                       int(n_lift.max()), np.where(found, dS[:, 0], -np.inf), n_lift)
            M = compact(np.concatenate([L, M], axis=1), per)
        if n_add.any():
            A = nearest_first(geo, X, _additions(geo, X, S[:, 0], vocab), int(n_add.max()),
                               np.where(found, ADD_FAR * dS[:, 0], -np.inf), n_add)
            M = compact(np.concatenate([M, A], axis=1), per)
        if not found.all() and (not tried_far or donors is not None):  # agents with no answer yet
            F = np.full((N, per, D), np.nan)
            if not tried_far:  # the proposals pushed further, and the fallback rows not tried in the first round
                F = _round_one(geo, X, np.asarray(P, float), None, per, FAR)
                if fallback is not None:
                    e = min(fallback.shape[1], int(first * EXTRA_SHARE))
                    F = np.concatenate([geo.project(X, np.asarray(fallback[:, e:], float)), F], axis=1)[:, :per]
                F = np.pad(F, ((0, 0), (0, max(0, per - F.shape[1])), (0, 0)), constant_values=np.nan)[:, :per]
            lost = np.flatnonzero(~found)
            for lo in range(0, len(lost), MOVE_BLOCK):  # the rows left: one feature at a time, then donors
                a = lost[lo:lo + MOVE_BLOCK]
                Sc = own_Sc[a] if own_Sc is not None else screens(geo, X[a], vocab)
                head = fresh(np.concatenate([F[a]] + ([] if tried_far else [Sc]), axis=1),
                             asked[a])[:, :per]  # rows asked before (a ray back at the agent) leave room
                if donors is not None:
                    T = _projected(geo, X[a], [np.asarray(donors(a, donor_at[a], per), float)])
                    gone = np.isnan(T).any(-1)  # past the last donor
                    # each agent's next donors are those after the ones its own rows reached (batch-free)
                    donor_at[a] += np.clip(cap[a] - (~np.isnan(head).any(-1)).sum(1), 0, (~gone).sum(1))
                    head = fresh(np.concatenate([head, T], axis=1), asked[a])[:, :per]
                F[a] = head
            F[~geo.keeps(X[:, None, :], F)] = np.nan
            M = np.pad(M, ((0, 0), (0, max(0, per - M.shape[1])), (0, 0)), constant_values=np.nan)[:, :per]
            M = np.where(found[:, None, None], M, F)
            tried_far = True
        M[np.arange(M.shape[1])[None, :] >= cap[:, None]] = np.nan  # each agent's own rows, then no repeats
        M = fresh(M, asked)  # the moves, additions and screens overlap: a repeated row is a row lost
        spare = np.flatnonzero(found & ((~np.isnan(M).any(-1)).sum(1) < cap))
        if len(spare):  # rows the moves leave unused: single-feature screens and additions nearer than the answer
            E = np.full((len(spare), per, D), np.nan)
            for lo in range(0, len(spare), MOVE_BLOCK):  # a block of agents at a time (memory: corners x D)
                a = spare[lo:lo + MOVE_BLOCK]
                Sc = own_Sc[a] if own_Sc is not None else screens(geo, X[a], vocab)
                parts = [Sc, _additions(geo, X[a], S[a, 0], vocab, Sc)]
                if n_corners:  # in steps: the vocabulary's corners, nearest first (corners.py)
                    parts.append(own_corners[a] if own_corners is not None else
                                 nearest_corners(geo, X[a], vocab, n_corners)[0])
                if donors is not None and rounds_left > 1:  # a round to follow: the neighbours' sets nearer than it
                    parts.append(_projected(geo, X[a], [np.asarray(donors(a, np.zeros(len(a), np.int64),
                                                                       SPARE_DONORS), float)]))
                E[lo:lo + MOVE_BLOCK] = nearest_first(geo, X[a], fresh(np.concatenate(parts, axis=1), asked[a]), per,
                                                      dS[a, 0], cap[a])
            M = np.pad(M, ((0, 0), (0, max(0, 2 * per - M.shape[1])), (0, 0)), constant_values=np.nan)
            M[spare] = compact(np.concatenate([M[spare], E], axis=1), M.shape[1])  # all kept until the repeats go
            M = fresh(M, asked)[:, :per]
        M[np.arange(M.shape[1])[None, :] >= cap[:, None]] = np.nan
        done |= np.isnan(M).all(axis=(1, 2))  # an agent with nothing left to ask stops, as it would alone
        M[done] = np.nan
        if done.all():
            break
        ok, used, proba = _accept(model, geo, X, M, threshold)
        calls, rows_left, rounds_left = calls + 1, rows_left - used, rounds_left - 1
        dm = np.full(ok.shape, np.inf)
        n_ok, q_ok = np.nonzero(ok)  # the accepted rows' distances only (each row's own sum: the same bits)
        dm[n_ok, q_ok] = geo.distance(X[n_ok], M[n_ok, q_ok])
        pool_C, pool_d = np.concatenate([S, M], axis=1), np.concatenate([dS, dm], axis=1)
        if lifting and rounds_left > 0:
            near = near_misses(geo, X, M, proba, ok, pool_d.min(1), kept=near)
        if rounds_left > 0 and rows_left.max() > 0:  # a round follows: its brackets, and the rows not to repeat
            refused = np.where((~ok & ~np.isnan(M).any(-1))[..., None], M, np.nan)
            recent = compact(np.concatenate([refused[:, ::-1], recent], axis=1), BRACKET_ROWS)
            asked = np.concatenate([asked, row_keys(M)], axis=1)
    B = np.where(found[:, None], S[:, 0], np.nan)
    dB = dS[:, 0]
    return SearchResult(B, dB, found, calls, int(budget.rows) - rows_left, S[:, 1:])
