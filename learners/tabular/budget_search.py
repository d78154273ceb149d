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
   of the optimum's set); in steps the best answer's split edges just inside it (its changed columns alone
   and in pairs at the vocabulary's values nearest it) go ahead of the spread, its one-move shrinks (``answer_shrinks``)
   take the places of the spread's nearest rows, and in the last round the rows
   every other piece leaves unused go to the best answer on a fine grid toward the agent (``fine_grid``). In steps,
   a refinement round that a later round follows gives the rows it leaves free to the best answer's columns
   bisected (``FREE_BISECT``) and then to the vocabulary's corners up to ``CORNER_FAR`` times the answer's
   distance (a set whose value the vocabulary lacks: its next value past it, shrunk in a later round); an agent
   with nothing accepted yet gets its nearest corners after the proposals pushed further, screens and donors.

Every answer was itself accepted by a model call (no value is recomputed after its check) and lies in the
agent's box, keeping the world's rules. ``rows_per_round`` splits the per-agent rows between rounds.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.black_box import Budget
from learners.tabular.bisection import edge_bisection
from learners.tabular.bolder import BOLD_GAIN, BOLD_SHARE, bolder
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
from learners.tabular.helper_thread import CallStart, counted, helper, when
from learners.tabular.lifts import LIFT_SHARE, lifted, near_misses
from learners.tabular.moves import (  # noqa: F401 (the constants and builders: read by the tests)
    ADD_SHRINK,
    ANSWER_SHRINKS,
    FRACTIONS,
    PAIR_FRACTIONS,
    RAY,
    STEP_FLIPS,
    STEP_FRACTIONS,
    STEP_VOCAB_STEPS,
    TRADE_BACKS,
    TRADE_SHARES,
    VOCAB_STEPS,
    _additions,
    _brackets,
    _moves,
    _moves_one,
    _starts,
    _trades,
    answer_edges,
    answer_shrinks,
    edge_twins,
)
from learners.tabular.reach import reach_rows
from learners.tabular.rows import ahead_of_nearest, compact, fresh, nan_as_zero, nearest_first, row_keys
from learners.tabular.rows import projected as _projected
from learners.tabular.set_spread import LOST_SPREAD, alternate_spread
from learners.tabular.speculation import (
    STAND_IN_SHIFTS,
    MoveCache,
    answer_piece,
    cached_moves,
    guess_shifts,
    speculate,
)
from learners.tabular.steps import corner_grid, float32_nudges

FAR = (3.0, 5.0, 8.0, 12.0, 20.0, 40.0, 100.0)  # round one's rays (first_round.SCALES) further in a later round, for an agent none of whose rows was accepted
SPARE_DONORS = 64  # the training neighbours' transplants offered to a round's unused rows
CORNERS = 1000  # at most this many nearest corners per agent offered to a round's unused rows (below WIDE_MIN_ROWS)
WIDE_CORNERS = 8  # in a search of WIDE_MIN_ROWS rows or more, this many corners per row of its budget instead
WIDE_MIN_ROWS = 2000  # (a set no proposal named, nearer than the answer: there the rows are to spare)
BRACKET_ROWS = 2048  # the latest refused rows per agent that bracket the starts' rays and the answer's columns
# (512 lost the bracket of Credit's fresh agent 186 by the last round at 8 x 2,000; memory: N x rows x D)
STARTS = 3  # distinct accepted rows per agent the refinement shortens (the nearest of each changed set first)
MAX_STARTS = 6  # and up to this many where a round has the rows
START_ROWS = 24  # rows a round needs per start before it takes one more
MOVE_BLOCK = 64  # agents whose shortening moves are built at a time (memory)
AHEAD_AGENTS = 64  # a batch this small gets round two's rows of its own built while round one's call waits
SCREEN_SHARE = 0.3  # of the first round's rows, at most this share for the screens (one feature at a time)
SCREEN_MIN_ROWS = 512  # only where the first round has this many rows: below, the proposals need them all
ADD_SHARE = 0.25  # of a refinement round's rows that a later round can shrink, the share for ``_additions``
REACH, REACH_SHARE = True, 0.25  # smooth model, surrogate: a refinement round's share for ``reach`` rows at most
EDGE_TWINS = True  # ask the answer's first inner edge also as float32 reads it on the answer's side
EDGE_SHARE, EDGE_ROWS = 0.5, 64  # in steps, of a refinement round's rows, the most for the answer's edges (``answer_edges``)
BISECT_SHARE, BISECT_ROWS = 0.25, 64  # in steps, of a refinement round's rows, the most for ``edge_bisection``
BISECT_LAST = 1  # only in the last this many rounds: earlier, polishing one answer crowds out the search for a nearer set
BISECT_MIN_CALLS = 3  # and only in a search of this many round trips or more (at 2, round two's rows go to the spread)
ADD_FAR = 1.5  # additions up to this multiple of the best answer's distance (farther than it: a new set)
FREE_BISECT = True  # rows a refinement round leaves free before the last rounds: the answer's columns bisected
CORNER_FAR = 1.5  # rows a round leaves free, a round to follow: corners up to this multiple of the answer's distance
LOST_PICK_SHARE = 0.75  # with ``next_picks``: of round two's rows for an agent round one left with nothing accepted, the most for them
NEAR_PICKS = 64  # with ``next_picks``: the most of them nearer than an agent's answer after round one, ahead of round two's moves
FINE_ROWS = 96  # in steps, of the last round's rows every other piece leaves unused, the most for ``fine_grid``


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


def _no_record(geo: WorldGeometry, X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """(N, Q) rows of ``C`` (N, Q, D) that break their agent's box, an integer code or a one-hot group
    (``geo.violations`` without the rules, which the rows' builders check; NaN rows break none)."""
    N, Q, D = C.shape
    return geo.violations(np.repeat(X, Q, axis=0), C.reshape(N * Q, D), rules=False).reshape(N, Q)


def _accept(model, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, threshold: float,
            go: threading.Event | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, Q) acceptance of the finite rows of ``C`` (N, Q, D) in one call, rows scored per agent, and (N, Q)
    the model's probabilities (NaN for the rows not scored). ``go`` is set as the call starts (the helper
    thread's jobs wait for it: started earlier, they would take the GIL from the work before the call).
    A row that is no answer (outside the agent's box, an integer code not whole, a one-hot group not one
    1: ``_no_record``) is set to NaN in ``C`` itself and never asked: accepted, it could become the answer."""
    N, Q, D = C.shape
    C[_no_record(geo, X, C)] = np.nan
    live = ~np.isnan(C).any(-1)
    proba = np.full((N, Q), np.nan)
    try:
        if live.any():
            rows = C[live]
            if go is not None:
                go.set()
            start = time.perf_counter()
            proba[live] = model.predict_proba(rows)  # (n,) P(accept): one round trip
            try:
                _CALL_SECONDS[model] = time.perf_counter() - start
            except TypeError:  # a model that takes no weak reference: no guess for it (``_guess``)
                pass
    finally:
        if go is not None:
            go.set()
    return proba > threshold, live.sum(1), proba


def _shortening_rows(geo: WorldGeometry, X: np.ndarray, S: np.ndarray, vocab: list[np.ndarray] | None, rows: int,
                     below: np.ndarray, steps: bool = False, rejected: np.ndarray | None = None,
                     caps: np.ndarray | None = None, trades: bool = False, cache: MoveCache | None = None) -> np.ndarray:
    """(N, rows, D) ``_nearest_first`` of ``_moves`` from the starts ``S`` (N, T, D), built ``MOVE_BLOCK`` agents
    at a time: the moves of all starts of a large batch would not fit in memory (a few thousand per
    agent), and only ``rows`` per agent survive. ``cache``: one agent's moves guessed while round one's
    call waited (``speculation.cached_moves``: the same rows)."""
    out = np.full((len(X), rows, X.shape[1]), np.nan)
    for lo in range(0, len(X), MOVE_BLOCK):
        sl = slice(lo, lo + MOVE_BLOCK)
        lo = None if rejected is None or steps else _brackets(geo, X[sl], S[sl], rejected[sl])
        if cache is not None and len(X) == 1 and (lo is not None or steps):
            moves = cached_moves(cache, geo, X[sl], S[sl], vocab, lo, trades, steps)
        else:
            moves = _moves(geo, X[sl], S[sl], vocab, steps, lo, trades)
        M = nearest_first(geo, X[sl], moves, rows, below[sl], None if caps is None else caps[sl])
        if steps and vocab is not None and ANSWER_SHRINKS:  # the best answer's one-move shrinks, all kept
            P = answer_piece(cache, "shrinks", geo, X[sl], S[sl, 0], vocab)
            M = ahead_of_nearest(nearest_first(geo, X[sl], P, rows, below[sl], None if caps is None else caps[sl]), M, rows)
        out[sl, : M.shape[1]] = M
    return out


def _agents_own_rows(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray] | None, corners: int
                     ) -> tuple[np.ndarray, np.ndarray | None]:
    """The rows a later round draws on that depend on the agents alone: their ``screens`` and, with ``corners``
    > 0, their nearest ``corners`` of the vocabulary (``corners.nearest_corners``)."""
    return screens(geo, X, vocab), (nearest_corners(geo, X, vocab, corners)[0] if corners else None)


def _corners_below(geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], k: int, below: np.ndarray,
                   own: np.ndarray | None = None) -> np.ndarray:
    """(N, k', D) the agents' nearest ``k`` corners (``own``: built already) up to the last one nearer than
    ``below`` (N,) of any of them: ``nearest_first`` keeps the same rows, and far fewer are carried once the answers
    are near. Past the first ``CORNERS``, only for the agents whose ``CORNERS``-th corner is still nearer than
    their answer (or not known: it broke a rule), since every later corner is farther."""
    if own is not None:
        R = own
        d = np.full(R.shape[:2], np.inf)
        n_i, q_i = np.nonzero(~np.isnan(R).any(-1))
        d[n_i, q_i] = geo.distance(X[n_i], R[n_i, q_i])
    else:
        R, d = nearest_corners(geo, X, vocab, min(k, CORNERS))
        more = np.flatnonzero(~(d[:, -1] >= below * (1 + 1e-9))) if k > CORNERS else np.zeros(0, np.int64)
        if len(more):  # inf (a rule broken, or fewer corners) compares False: built
            R = np.pad(R, ((0, 0), (0, k - R.shape[1]), (0, 0)), constant_values=np.nan)
            d = np.pad(d, ((0, 0), (0, k - d.shape[1])), constant_values=np.inf)
            R[more], d[more] = nearest_corners(geo, X[more], vocab, k)
    near = d < below[:, None] * (1 + 1e-9)  # a superset of what nearest_first keeps (it measures them again)
    last = np.where(near, np.arange(d.shape[1])[None, :], -1).max(1, initial=-1)
    return R[:, : int(last.max(initial=-1)) + 1]


_CALL_SECONDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per model, the seconds its last call took
GUESS_SHARE = 0.8  # of the model's last round trip past the call's start, the time round two's moves are guessed in while it waits
GUESS_MIN_SECONDS = 0.003  # no guess where a call takes less (the helper thread would only slow the search's own)


def _corner_count(rows: int) -> int:
    """The nearest corners per agent offered to a round's unused rows in a search of ``rows`` rows an answer."""
    return rows * WIDE_CORNERS if rows >= WIDE_MIN_ROWS else min(rows, CORNERS)


def _ahead(pool: ThreadPoolExecutor, geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray] | None, corners: int,
           go: threading.Event) -> Future | None:
    """``_agents_own_rows`` started on the helper thread ``pool``, to be built while round one's call waits on
    the model (a remote model's round trip: a request's latency is the waits plus what is computed between
    them); None for a batch larger than ``AHEAD_AGENTS`` (memory: they are built a block at a time where
    needed)."""
    return pool.submit(when, go, _agents_own_rows, geo, X, vocab, corners) if len(X) <= AHEAD_AGENTS else None


def _guess(model, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, surrogate: Any, threshold: float,
           budget: Budget, vocab: list[np.ndarray] | None, steps: bool = False,
           stand_in: Callable[[np.ndarray], np.ndarray] | None = None, go: CallStart | None = None,
           screens: Callable[[], np.ndarray] | None = None) -> tuple[MoveCache, Callable[[], None]] | None:
    """For one agent with a stand-in of the model (a smooth model: ``surrogate``, its logit against ``threshold``'s;
    in ``steps``: ``stand_in``, a student's margin against 0) and a round to follow, an empty ``MoveCache`` and the
    job that fills it (``speculation.speculate``: round two's moves from the stand-in's guess of round one's
    answers) until ``GUESS_SHARE`` of the model's last round trip past the call's start (``go``), to run on the
    helper thread after ``_ahead``'s and the near picks' (``screens()``: the agent's own, built by ``_ahead``);
    None otherwise, and where that round trip took under ``GUESS_MIN_SECONDS`` (a model in this process: no wait
    to fill) or none is known yet."""
    try:
        wait = _CALL_SECONDS.get(model)
    except TypeError:
        wait = None
    if len(X) != 1 or (stand_in if steps else surrogate) is None or int(budget.calls) < 2 or wait is None \
            or wait < GUESS_MIN_SECONDS:
        return None
    if steps:
        guesser = (stand_in, 0.0, STAND_IN_SHIFTS)
    else:
        guesser = (surrogate.logit, float(np.log(threshold / (1.0 - threshold))),
                   guess_shifts(getattr(surrogate, "sigma_", 0.0)))
    rounds_left = int(budget.calls) - 1
    cap = (int(budget.rows) - int((~np.isnan(C).any(-1)).sum())) // max(rounds_left, 1)  # round two's rows
    n_starts = max(STARTS, min(MAX_STARTS, cap // START_ROWS))
    cache = MoveCache()
    return cache, functools.partial(speculate, cache, geo, X[0], C, *guesser, n_starts, vocab, rounds_left > 1,
                                    GUESS_SHARE * wait, steps, go, screens)


@counted
def budget_search(model, geo: WorldGeometry, X: np.ndarray, P: np.ndarray, budget: Budget, *,
                  vocab: list[np.ndarray] | None = None, threshold: float = 0.5,
                  first_share: float = 0.5, fallback: np.ndarray | None = None, surrogate: Any = None,
                  lead: int = 0, grid_share: float = 0.0, steps: bool = False, donors: Any = None,
                  picks: np.ndarray | None = None, next_picks: Callable[[np.ndarray, int], np.ndarray] | None = None,
                  near_picks: int = NEAR_PICKS, stand_in: Callable[[np.ndarray], np.ndarray] | None = None
                  ) -> SearchResult:
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
    changed sets at the vocabulary's values (for a model that answers in steps: ``steps.step_share``);
    ``picks`` (N, k, D): rows that lead that share (a student's likeliest accepted corners: ``student.picks``);
    ``next_picks(agents, k)`` (len(agents), k, D): more of a student's picks, nearest first, for round two: an agent
    round one left with nothing accepted asks them first (a share ``LOST_PICK_SHARE`` of its rows at most: a set no
    proposal named, among corners too many for the round to list nearest first; where round one asked ``picks``,
    every other one taken round robin over their changed sets: ``set_spread``), and every other agent its first
    ``near_picks`` past ``picks`` that are nearer than its answer, ahead of its moves (built while round one's call
    waits, for a batch of ``AHEAD_AGENTS`` or fewer).
    A refinement round that a later round follows gives a share ``ADD_SHARE`` of its rows to ``_additions``:
    the best answer with one more feature changed, up to ``ADD_FAR`` times farther; an accepted one is a
    new changed set that the next rounds shrink (German forest at 8 x 2000: .89 -> .94). Rows a round's moves
    leave unused go to the screens and the additions nearer than the answer (a single feature the
    proposals' sets left out, found within the rows already paid for) and, where a later round follows, the first
    ``SPARE_DONORS`` donors nearer than the answer (a neighbour's changed set the proposals lacked). ``steps``: the model answers in steps
    (``steps.step_share``): the shrinks take ``STEP_VOCAB_STEPS`` vocabulary values and ``STEP_FRACTIONS``,
    and a changed column also goes to ``STEP_FLIPS`` vocabulary values on the other side of the agent; ahead of
    a refinement round's spread, up to ``EDGE_ROWS`` (``EDGE_SHARE`` of its rows) of the best answer's split
    edges just inside it (``moves.answer_edges``) and up to ``BISECT_ROWS`` (``BISECT_SHARE``) of its changed columns
    bisected between it and the refused rows that bracket them (``bisection.edge_bisection``; in the last
    ``BISECT_LAST`` rounds of a search of ``BISECT_MIN_CALLS`` round trips or more). On a model in steps, which
    reads rows as float32, the answer's first inner edge is also asked one float32 step toward the answer where
    the labels' copy of it reads on the agent's side (``moves.edge_twins``, ``EDGE_TWINS``), and rows a round
    leaves unused go last to the agent with one column one float32 step either way (``steps.float32_nudges``: an
    agent right on a split); with a round to follow, the rows still free go to ``edge_bisection`` of the answer
    (``FREE_BISECT``) and to the corners up to ``CORNER_FAR`` times its distance. An agent that a refinement
    round brought less than 1% nearer gets, in the next round,
    a share ``BOLD_SHARE`` of its rows for the refused rows outside its answer's changed set pushed further from it
    (``bolder.bolder``). With a surrogate and a smooth model, the lead proposals' rays that round one refused at
    every rung are asked in round two at the crossings their logits point to (``reach.reach_rows``; a share
    ``REACH_SHARE`` of its rows at most), an agent without an answer too. ``stand_in`` (rows -> the logit that the
    model accepts them; a student's margin): on a model in steps, one agent's round-two moves are built from its
    guess of round one's answers while the call waits (``speculation``: the same answers, sooner)."""
    X = np.atleast_2d(np.asarray(X, float))
    N, D = X.shape
    rows_left = np.full(N, int(budget.rows))
    first = int(budget.rows) if int(budget.calls) == 1 else max(1, int(round(first_share * int(budget.rows))))
    if surrogate is not None:
        C = _first_round_with_surrogate(geo, X, np.asarray(P, float), vocab, first, fallback, surrogate, lead)
        ladder = np.full((N, lead * len(LEAD_LADDER), D), np.nan)  # its lead rays' rungs, as built (``reach``;
        ladder[:, :C.shape[1]] = C[:, :ladder.shape[1]]  # a round one shorter than the ladder holds its first)
    else:
        n_screen = int(SCREEN_SHARE * first) if first >= SCREEN_MIN_ROWS else 0
        n_grid = int(grid_share * first) if vocab is not None else 0
        C = _round_one(geo, X, np.asarray(P, float), vocab, first - n_screen - n_grid, extra=fallback)
        if n_grid:
            k = 0 if picks is None else min(picks.shape[1], n_grid)  # the student's picks lead the grid's rows
            grid = corner_grid(geo, X, np.asarray(P, float), vocab, n_grid)[:, :n_grid - k]
            C = np.concatenate([np.asarray(picks, float)[:, :k], grid, C] if k else [grid, C], axis=1)
        if n_screen:
            C = np.concatenate([C, compact(screens(geo, X, vocab), n_screen)], axis=1)
    C[~geo.keeps(X[:, None, :], C)] = np.nan  # a rule-breaking row is not scored
    C = fresh(C)  # rays, snaps and grids meet: each row once
    n_corners = _corner_count(int(budget.rows)) if steps and vocab is not None else 0
    go = CallStart()  # the helper's jobs wait for the call (and the guess ends a share of its wait after its start)
    pool = helper() if int(budget.calls) > 1 else None  # one pool for both jobs (None: none of them)
    ahead_ok = pool is not None and len(X) * n_corners <= AHEAD_AGENTS * CORNERS  # memory: agents x corners x D
    try:  # an error before the call must not leave the helper's jobs waiting for it (the next search's queue behind)
        ahead = _ahead(pool, geo, X, vocab, n_corners, go) if ahead_ok else None
        near_picks = int(near_picks)
        k_near = near_picks + (0 if picks is None else int(np.asarray(picks).shape[1]))  # past the ones round one asks
        near_todo = next_picks is not None and near_picks > 0 and int(budget.calls) > 1
        near_job = (pool.submit(when, go, next_picks, np.arange(N), k_near)
                    if near_todo and pool is not None and len(X) <= AHEAD_AGENTS else None)
        guess = (_guess(model, geo, X, C, surrogate, threshold, budget, vocab, steps, stand_in, go, lambda: ahead.result()[0])
                 if ahead is not None else None)
        guess = (guess[0], pool.submit(when, go, guess[1])) if guess is not None else None
        ok, used, proba = _accept(model, geo, X, C, threshold, go)
    finally:
        go.set()
    own_Sc, own_corners = ahead.result() if ahead is not None else (None, None)
    cache = None
    if guess is not None:  # the guessing stops at its next start (not begun: never); what it built is kept
        cache = guess[0]
        cache.stop.set()
        if not guess[1].cancel():  # queued behind the near picks, it would make this thread wait for them too
            guess[1].result()
    calls, rows_left = 1, rows_left - used
    reach = None  # a smooth model with a surrogate: the lead rays refused at every rung, reached (``reach``)
    if REACH and surrogate is not None and lead and not steps and int(budget.calls) > 1:
        reach = reach_rows(geo, X, np.asarray(P, float)[:, :lead], LEAD_LADDER, ladder, C, proba, threshold)
    pool_C, pool_d = C, np.where(ok, geo.distance(X[:, None, :], nan_as_zero(C)), np.inf)  # every accepted row
    lifting = steps and int(budget.calls) > 1  # a model in steps: its near misses, lifted by one feature (lifts.py)
    near = near_misses(geo, X, C, proba, ok, pool_d.min(1)) if lifting else None
    # scored and refused, the latest first: the brackets (only the latest BRACKET_ROWS kept: memory)
    recent = compact(np.where((~ok & ~np.isnan(C).any(-1))[..., None], C, np.nan)[:, ::-1], BRACKET_ROWS)
    asked = row_keys(np.where(np.isnan(C).any(-1, keepdims=True), np.nan, C))  # every row scored: never twice
    rounds_left = int(budget.calls) - 1
    tried_far, donor_at = False, np.zeros(N, np.int64)  # donor_at: each agent's next donor rank
    done = np.zeros(N, bool)
    stalled = np.zeros(N, bool)  # agents the last refinement round brought less than 1% nearer (``bolder``)
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
                             recent, cap - n_add - n_lift, trades=rounds_left > 1, cache=cache)
        if n_lift.any():  # the near misses with one more feature, ahead of the moves (they are few and new)
            L = lifted(geo, X, near[0], own_Sc if own_Sc is not None else lambda a: screens(geo, X[a], vocab), asked,
                       int(n_lift.max()), np.where(found, dS[:, 0], -np.inf), n_lift)
            M = compact(np.concatenate([L, M], axis=1), per)
        if steps and vocab is not None and EDGE_ROWS:  # the answer's split edges just inside it, ahead of the spread
            n_edge = np.minimum(EDGE_ROWS, (EDGE_SHARE * cap).astype(np.int64))
            Ed = nearest_first(geo, X, fresh(answer_piece(cache, "edges", geo, X, S[:, 0], vocab), asked), int(n_edge.max()),
                               np.where(found, dS[:, 0], -np.inf), n_edge)
            M = compact(np.concatenate([Ed, M], axis=1), per)
            if EDGE_TWINS:  # the first edge's float32 twin, ahead of them (a few rows: one per changed column)
                M = compact(np.concatenate([fresh(answer_piece(cache, "twins", geo, X, S[:, 0], vocab), asked), M], axis=1), per)
        if steps and BISECT_ROWS and rounds_left <= BISECT_LAST and int(budget.calls) >= BISECT_MIN_CALLS:  # bisected
            n_bis = np.minimum(BISECT_ROWS, (BISECT_SHARE * cap).astype(np.int64))
            Bi = nearest_first(geo, X, fresh(edge_bisection(geo, X, S[:, 0], recent), asked), int(n_bis.max()),
                               np.where(found, dS[:, 0], -np.inf), n_bis)
            M = compact(np.concatenate([Bi, M], axis=1), per)
        n_bold = np.where(stalled, (BOLD_SHARE * cap).astype(np.int64), 0)
        if n_bold.any():  # the last round brought these agents less than 1% nearer: their refused rows, bolder
            a = np.flatnonzero(n_bold)
            Bd = np.full((N, int(n_bold.max()), D), np.nan)
            for lo in range(0, len(a), MOVE_BLOCK):  # a block of agents at a time (memory: rows x factors x D)
                blk = a[lo:lo + MOVE_BLOCK]
                Bd[blk] = bolder(geo, X[blk], S[blk, 0], recent[blk], vocab, asked[blk], Bd.shape[1], dS[blk, 0],
                                 n_bold[blk])
            M = compact(np.concatenate([Bd, M], axis=1), per)
        if near_todo and calls == 1 and found.any():  # the student's next picks nearer than the answer, ahead
            a = np.flatnonzero(found)
            Np = near_job.result()[a] if near_job is not None else next_picks(a, k_near)
            Np = nearest_first(geo, X[a], fresh(np.asarray(Np, float), asked[a]), near_picks, dS[a, 0],
                               np.minimum(cap[a], near_picks))
            Q = np.full((N, Np.shape[1], D), np.nan)
            Q[a] = Np
            M = compact(np.concatenate([Q, M], axis=1), per)
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
                # each agent's own rows only: a row past its cap would stand in for a repeat that ``fresh``
                # drops below, and the batch's widest cap would then choose an agent's rows
                F[np.arange(per)[None, :] >= cap[:, None]] = np.nan
            lost = np.flatnonzero(~found)
            for lo in range(0, len(lost), MOVE_BLOCK):  # the rows left: one feature at a time, then donors
                a = lost[lo:lo + MOVE_BLOCK]
                Sc = own_Sc[a] if own_Sc is not None else screens(geo, X[a], vocab)
                lead_rows = []
                if next_picks is not None and not tried_far and LOST_PICK_SHARE > 0:
                    n_lost = max(1, int(LOST_PICK_SHARE * per))
                    if picks is None:  # the student's first picks, nearest first
                        Lp = np.asarray(next_picks(a, n_lost), float)
                    else:  # round one refused its picks: the next ones, every other spread over their sets
                        own = k_near - near_picks + LOST_SPREAD * (LOST_PICK_SHARE * cap[a]).astype(np.int64)
                        Lp = np.asarray(next_picks(a, int(own.max())), float)
                        Lp[np.arange(Lp.shape[1])[None, :] >= own[:, None]] = np.nan  # each agent's own list
                        Lp = alternate_spread(geo, X[a], fresh(Lp, asked[a]), C[a])[:, :n_lost]
                    Lp[np.arange(Lp.shape[1])[None, :] >= (LOST_PICK_SHARE * cap[a]).astype(np.int64)[:, None]] = np.nan
                    lead_rows = [Lp]
                head = fresh(np.concatenate(lead_rows + [F[a]] + ([] if tried_far else [Sc]), axis=1),
                             asked[a])[:, :per]  # rows asked before (a ray back at the agent) leave room
                if donors is not None:
                    T = _projected(geo, X[a], [np.asarray(donors(a, donor_at[a], per), float)])
                    T[np.arange(T.shape[1])[None, :] >= cap[a][:, None]] = np.nan  # the agent's own cap of donors
                    gone = np.isnan(T).any(-1)  # past the last donor
                    # each agent's next donors are those after the ones its own rows reached (batch-free)
                    donor_at[a] += np.clip(cap[a] - (~np.isnan(head).any(-1)).sum(1), 0, (~gone).sum(1))
                    head = fresh(np.concatenate([head, T], axis=1), asked[a])[:, :per]
                if n_corners:  # in steps, the rows still free: the vocabulary's corners, nearest first (a set no
                    # proposal, screen or donor holds: Adult forest's fresh agent 323 had none accepted at 8 x 2,000)
                    # (no agent asks more than its budget's rows: its nearest that many corners are all it can use)
                    K = _corners_below(geo, X[a], vocab, min(n_corners, int(budget.rows)), np.full(len(a), np.inf),
                                       None if own_corners is None else own_corners[a][:, :int(budget.rows)])
                    head = fresh(np.concatenate([head, K], axis=1), asked[a])[:, :per]
                F[a] = head
            F[~geo.keeps(X[:, None, :], F)] = np.nan
            M = np.pad(M, ((0, 0), (0, max(0, per - M.shape[1])), (0, 0)), constant_values=np.nan)[:, :per]
            M = np.where(found[:, None, None], M, F)
            tried_far = True
        if reach is not None:  # round one's refused lead rays at their estimated crossings, ahead of the rest
            # (an agent without an answer too: its fallback rows above follow them)
            n_reach = np.minimum(reach.shape[1], (REACH_SHARE * cap).astype(np.int64))
            Rc = nearest_first(geo, X, fresh(reach, asked), int(n_reach.max()), np.where(found, dS[:, 0], np.inf),
                               n_reach)
            M = compact(np.concatenate([Rc, M], axis=1), per)
            reach = None
        M[np.arange(M.shape[1])[None, :] >= cap[:, None]] = np.nan  # each agent's own rows, then no repeats
        M = fresh(M, asked)  # the moves, additions and screens overlap: a repeated row is a row lost
        spare = np.flatnonzero(found & ((~np.isnan(M).any(-1)).sum(1) < cap))
        if len(spare):  # rows the moves leave unused: single-feature screens and additions nearer than the answer
            E = np.full((len(spare), per, D), np.nan)
            block = max(1, MOVE_BLOCK * CORNERS // max(n_corners, CORNERS))  # agents at a time (memory: corners x D)
            for lo in range(0, len(spare), block):
                a = spare[lo:lo + block]
                Sc = own_Sc[a] if own_Sc is not None else screens(geo, X[a], vocab)
                parts = [Sc, answer_piece(cache, "additions", geo, X[a], S[a, 0], vocab, Sc)]
                if n_corners:  # in steps: the vocabulary's corners, nearest first (corners.py)
                    parts.append(_corners_below(geo, X[a], vocab, n_corners, dS[a, 0],
                                                None if own_corners is None else own_corners[a]))
                if donors is not None and rounds_left > 1:  # a round to follow: the neighbours' sets nearer than it
                    parts.append(_projected(geo, X[a], [np.asarray(donors(a, np.zeros(len(a), np.int64),
                                                                       SPARE_DONORS), float)]))
                E[lo:lo + block] = nearest_first(geo, X[a], fresh(np.concatenate(parts, axis=1), asked[a]), per,
                                                 dS[a, 0], cap[a])
                if steps:  # rows still unused: an agent right on a split, crossed by the next float32 either way
                    # (asked once, in the first round with room: an accepted one is bisected toward the agent later)
                    E[lo:lo + block] = compact(fresh(np.concatenate([E[lo:lo + block], float32_nudges(geo, X[a])],
                                                                    axis=1), asked[a]), per)
                if steps and FINE_ROWS and rounds_left == 1:  # the last round's rows left: the answer on a fine grid
                    G = nearest_first(geo, X[a], fresh(answer_piece(cache, "fine", geo, X[a], S[a, 0], vocab), asked[a]), FINE_ROWS, dS[a, 0],
                                      np.minimum(cap[a], FINE_ROWS))
                    E[lo:lo + block] = compact(fresh(np.concatenate([E[lo:lo + block], G], axis=1), asked[a]), per)
            M = np.pad(M, ((0, 0), (0, max(0, 2 * per - M.shape[1])), (0, 0)), constant_values=np.nan)
            M[spare] = compact(np.concatenate([M[spare], E], axis=1), M.shape[1])  # all kept until the repeats go
            M = fresh(M, asked)[:, :per]
        M[np.arange(M.shape[1])[None, :] >= cap[:, None]] = np.nan
        if FREE_BISECT and steps and BISECT_ROWS and rounds_left > BISECT_LAST:  # rows still free before the last
            # rounds: the answer's columns bisected there too (nothing else would ask them: no set is crowded out)
            free = cap - (~np.isnan(M).any(-1)).sum(1)
            a_free = np.flatnonzero(found & (free > 0))
            if len(a_free):
                Bi = nearest_first(geo, X[a_free], fresh(edge_bisection(geo, X[a_free], S[a_free, 0], recent[a_free]),
                                                         asked[a_free]), per, dS[a_free, 0], free[a_free])
                M[a_free] = fresh(np.concatenate([M[a_free], Bi], axis=1))[:, :per]
        if CORNER_FAR and n_corners and rounds_left > 1:  # rows still free, a round to follow: corners a little
            # farther than the answer (a set whose value the vocabulary lacks: its next value past it, shrunk later)
            free = cap - (~np.isnan(M).any(-1)).sum(1)
            a_free = np.flatnonzero(found & (free > 0))
            block = max(1, MOVE_BLOCK * CORNERS // max(n_corners, CORNERS))
            for lo in range(0, len(a_free), block):
                a = a_free[lo:lo + block]
                far = CORNER_FAR * dS[a, 0]
                K = _corners_below(geo, X[a], vocab, n_corners, far, None if own_corners is None else own_corners[a])
                K = nearest_first(geo, X[a], fresh(K, asked[a]), per, far, free[a])
                M[a] = fresh(np.concatenate([M[a], K], axis=1))[:, :per]
        done |= np.isnan(M).all(axis=(1, 2))  # an agent with nothing left to ask stops, as it would alone
        M[done] = np.nan
        if done.all():
            break
        ok, used, proba = _accept(model, geo, X, M, threshold)
        calls, rows_left, rounds_left = calls + 1, rows_left - used, rounds_left - 1
        dm = np.full(ok.shape, np.inf)
        n_ok, q_ok = np.nonzero(ok)  # the accepted rows' distances only (each row's own sum: the same bits)
        dm[n_ok, q_ok] = geo.distance(X[n_ok], M[n_ok, q_ok])
        # under 1% nearer is no progress; an agent with no answer yet has its own rows (the fallback)
        stalled = found & ~(dm.min(1) < BOLD_GAIN * dS[:, 0])
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
