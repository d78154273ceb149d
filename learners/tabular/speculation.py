"""Round two's moves built while round one's call waits on the model, from a guess checked before use
(issue 56).

A remote model's round trip is mostly waiting: a request's latency is the waits plus what is computed
between them. While round one's rows are out, the surrogate (``surrogate.Surrogate``, the learned
stand-in of the model) says which of them the model will accept; the rows the refinement would then
shorten (``moves._starts``) and their brackets (``moves._brackets``, from the rows it guesses refused)
follow, and ``speculate`` builds each guessed start's moves on the helper thread, one start at a time,
into a ``MoveCache`` keyed by the start row and its bracket. When the model's answers come back the
search stops the guessing and ``cached_moves`` takes the moves of every start it really shortens from
the cache where the guess was right, and builds the others. A start's moves depend on the agent, the row
and its bracket alone (``moves._moves_one`` builds each start's rows on its own), so the answers are the
same bits with or without the guess (tested); only where the time goes differs. One agent at a time (a
request).

A model in steps has no surrogate; where the proposer has a student of its corners (``student.CornerStudent``,
the model's acceptance learnt at fit time) its margin is the guess (``steps``): a start's moves there are
``moves._moves_one``'s whole rows (no bracket: its ray does not depend on the refused rows), built ``STEP_BATCH``
guessed starts a call and kept start by start. Adult forest with the student, 2 x 256 at 20 ms a call: round two's
moves (about 2.3 ms of the compute between the two calls) taken from the cache for 64-67% of the starts
(``docs/generators_log.md``, *Round two's moves guessed by the student, and its picks compiled*).

Each guess's nearest start is also its guess of round two's best answer, and the rows built from that answer alone
(``ANSWER_PIECES``: its one-move shrinks, split edges, float32 twins, additions and, before the last round only
if it is round two, its fine grid) are built next, into the same cache (``answer_piece``): about 2.8 ms of the
compute between Adult forest's calls, built in the wait's spare time (the guess of the starts ended 6 ms before the
call returned on the median agent). The best answer is harder to guess than a start: on Adult forest's first 100
held-out agents 93 of the 488 pieces round two asked came from the cache (start moves: 338 of 577), and the p50 at
20 ms a call moved by -0.36 and -0.46 ms (median of the paired differences, two runs of 300 answers each).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from learners.tabular.fine_grid import fine_grid
from learners.tabular.geometry import WorldGeometry
from learners.tabular.helper_thread import CallStart
from learners.tabular.moves import (
    _additions,
    _moves_one,
    _ray,
    _shrinks,
    _starts,
    answer_edges,
    answer_shrinks,
    edge_twins,
)
from learners.tabular.rows import nan_as_zero
from learners.tabular.rows import projected as _projected
from learners.tabular.surrogate import SIGMA_FLOOR

__all__ = ["ANSWER_PIECES", "EXTRA_STARTS", "GUESS_SIGMAS", "STAND_IN_SHIFTS", "STEP_BATCH", "MoveCache", "answer_piece",
           "cached_moves", "guess_shifts", "speculate"]

EXTRA_STARTS = 3  # guessed starts beyond the round's count: the next rows in case a guessed one is refused
GUESS_SIGMAS = (2.0,)  # the surrogate's logit shifted by these multiples of its error, either way: more guesses
STEP_BATCH = 3  # in steps, a guess's starts built this many at a time (one call each: cheaper a start than alone,
# and the guess can still stop between them; Adult forest: 1.3 ms for one start's moves, 2.6 for three, 4.3 for six)
STAND_IN_SHIFTS = (0.0, 1.0, -1.0)  # a student's margin (a logit) shifted so, in turn: its guess, then the doubts either way


class MoveCache:
    """The shrinking moves (``moves._shrinks``, projected: their finite rows, in order) of the starts guessed so
    far, keyed by start row and ``trades``; ``stop`` ends the guessing (checked between starts)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[bytes, bool], np.ndarray] = {}
        self.stop = threading.Event()
        self.hits = 0  # starts whose moves the search took from the cache
        self.misses = 0  # and those it built after the call
        self.pieces: dict[tuple[str, bytes], np.ndarray] = {}  # ``answer_piece``'s rows, by piece and answer row
        self.piece_hits = 0  # pieces the search took from the cache
        self.piece_misses = 0  # and those it built after the call

    @staticmethod
    def key(start: np.ndarray, trades: bool) -> tuple[bytes, bool]:
        """A start row's key: its bytes and whether its moves include the trades."""
        return np.ascontiguousarray(start, float).tobytes(), bool(trades)


def _finite(M: np.ndarray) -> list[np.ndarray]:
    """Per row block of ``M`` (T, Q, D), its finite rows, in order."""
    live = ~np.isnan(M).any(-1)
    return [M[t][live[t]] for t in range(len(M))]


def _shrink_rows(geo: WorldGeometry, x: np.ndarray, S: np.ndarray, vocab: list[np.ndarray] | None,
                 trades: bool) -> list[np.ndarray]:
    """Per start row of ``S`` (T, D) of the agent ``x`` (D,), the finite rows of its projected shrinks."""
    X = np.repeat(x[None], len(S), axis=0)
    return _finite(_projected(geo, X, _shrinks(geo, X, S, vocab, False, trades)))


def _step_rows(geo: WorldGeometry, x: np.ndarray, S: np.ndarray, vocab: list[np.ndarray] | None,
               trades: bool) -> list[np.ndarray]:
    """Per start row of ``S`` (T, D) of the agent ``x`` (D,), in a model in steps, the finite rows of its whole
    moves (``moves._moves_one``: its shrinks and its ray, projected), built for all starts in one call."""
    X = np.repeat(x[None], len(S), axis=0)
    return _finite(_moves_one(geo, X, S, vocab, True, None, trades))


def speculate(cache: MoveCache, geo: WorldGeometry, x: np.ndarray, C: np.ndarray, logit: Callable[[np.ndarray], np.ndarray],
              cut: float, shifts: tuple[float, ...], n_starts: int, vocab: list[np.ndarray] | None, trades: bool,
              seconds: float = np.inf, steps: bool = False, go: CallStart | None = None,
              screens: Callable[[], np.ndarray] | None = None) -> None:
    """Fill ``cache`` with the moves of the starts the refinement would take (``moves._starts``: ``n_starts`` and
    ``EXTRA_STARTS`` more) if the model accepted the rows of round one ``C`` (1, Q, D) whose stand-in ``logit`` is
    over ``cut``, then with it shifted by each of ``shifts`` past the first (the model accepting rows the stand-in
    doubts, or refusing rows it trusts). A smooth model: each start's shrinks, one start at a time; in ``steps``:
    each guess's new starts' whole moves, ``STEP_BATCH`` starts a call. After each guess's starts, the pieces of
    its nearest start (``answer_piece``) that round two asks: in ``steps`` all of ``ANSWER_PIECES`` (``fine`` where
    round two is the last: not ``trades``), else ``additions``; ``screens()``: the agent's screens, built ahead
    (``additions`` is skipped without them). Stops between calls once ``cache.stop`` is
    set or ``seconds`` have passed since the model call's start (``go``; without it, since now): the guess ends
    before the call returns, since after it the guess would only hold the GIL the search's thread wants."""
    end = (go.at if go is not None and np.isfinite(go.at) else time.perf_counter()) + seconds
    X = x[None]
    live = ~np.isnan(C).any(-1)
    z = np.full(live.shape, -np.inf)
    if live.any():
        z[live] = logit(C[live])
    d = geo.distance(X[:, None, :], nan_as_zero(C))
    for shift in shifts:
        S, dS = _starts(C, np.where(z + shift > cut, d, np.inf), n_starts + EXTRA_STARTS, X)
        new = [t for t in range(S.shape[1])
               if np.isfinite(dS[0, t]) and cache.key(S[0, t], trades) not in cache.rows]
        batches = [new[i:i + STEP_BATCH] for i in range(0, len(new), STEP_BATCH)] if steps else [[t] for t in new]
        build = _step_rows if steps else _shrink_rows
        for ts in batches:
            time.sleep(0)  # the GIL offered between starts: the search's thread, its call back, takes it now, not in 5 ms
            if cache.stop.is_set() or time.perf_counter() > end:
                return
            for t, rows in zip(ts, build(geo, x, S[0, ts], vocab, trades), strict=True):
                cache.rows[cache.key(S[0, t], trades)] = rows
        if not np.isfinite(dS[0, 0]):
            continue
        names = [n for n in (ANSWER_PIECES if steps else ("additions",)) if not (n == "fine" and trades)
                 and not (n == "additions" and screens is None)]
        for name in names:
            key = (name, cache.key(S[0, 0], False)[0])
            if key in cache.pieces:
                continue
            time.sleep(0)
            if cache.stop.is_set() or time.perf_counter() > end:
                return
            cache.pieces[key] = _piece(name, geo, X, S[0, :1], vocab, screens() if name == "additions" else None)


ANSWER_PIECES = ("shrinks", "edges", "twins", "additions", "fine")  # the rows built from the best answer alone


def _piece(name: str, geo: WorldGeometry, X: np.ndarray, B: np.ndarray, vocab: list[np.ndarray] | None,
           screens: np.ndarray | None) -> np.ndarray:
    """(N, Q, D) the rows ``name`` (of ``ANSWER_PIECES``) of the agents ``X`` (N, D) with best answers ``B`` (N, D)."""
    if name == "shrinks":
        return answer_shrinks(geo, X, B, vocab)
    if name == "edges":
        return answer_edges(geo, X, B, vocab)
    if name == "twins":
        return edge_twins(geo, X, B, vocab)
    if name == "additions":
        return _additions(geo, X, B, vocab, screens)
    if name == "fine":
        return fine_grid(geo, X, B)
    raise ValueError(f"name: one of {ANSWER_PIECES}, got {name!r}")


def answer_piece(cache: MoveCache | None, name: str, geo: WorldGeometry, X: np.ndarray, B: np.ndarray,
                 vocab: list[np.ndarray] | None, screens: np.ndarray | None = None) -> np.ndarray:
    """``_piece``: for one agent with an answer and a ``cache``, from the cache where the guess built it for this
    answer (a copy: the same bits), else built now and kept; otherwise built now. ``screens``: the agent's
    ``first_round.screens`` (``additions`` only; the ones the guess had: the agent's own, built ahead)."""
    if cache is None or len(X) != 1 or np.isnan(B).any():
        return _piece(name, geo, X, B, vocab, screens)
    key = (name, cache.key(B[0], False)[0])
    hit = cache.pieces.get(key)
    if hit is None:
        cache.piece_misses += 1
        hit = cache.pieces[key] = _piece(name, geo, X, B, vocab, screens)
    else:
        cache.piece_hits += 1
    return hit.copy()


def guess_shifts(sigma: float) -> tuple[float, ...]:
    """A surrogate's shifts of its logit for ``speculate``: none, then ``GUESS_SIGMAS`` of its error ``sigma``
    either way."""
    return (0.0,) + tuple(s * max(float(sigma), SIGMA_FLOOR) for g in GUESS_SIGMAS for s in (g, -g))


def cached_moves(cache: MoveCache, geo: WorldGeometry, X: np.ndarray, S: np.ndarray, vocab: list[np.ndarray] | None,
                 lo: np.ndarray | None, trades: bool, steps: bool = False) -> np.ndarray:
    """(1, Q, D) the finite rows of ``moves._moves`` for one agent ``X`` (1, D) and its starts ``S`` (1, T, D)
    with brackets ``lo`` (1, T; None in ``steps``), start after start as ``_moves`` orders them (its shrinks, then
    its ray): the shrinks (in ``steps``, the whole moves) from ``cache`` where it holds them, the rest built now
    (one call for all of them)."""
    D = S.shape[2]
    starts = [t for t in range(S.shape[1]) if not np.isnan(S[0, t]).any()]
    if not starts:
        return np.full((1, 1, D), np.nan)
    keys = [cache.key(S[0, t], trades) for t in starts]
    todo = [i for i, k in enumerate(keys) if k not in cache.rows]
    cache.hits += len(starts) - len(todo)
    cache.misses += len(todo)
    if todo:
        build = _step_rows if steps else _shrink_rows
        for i, rows in zip(todo, build(geo, X[0], S[0, [starts[i] for i in todo]], vocab, trades), strict=True):
            cache.rows[keys[i]] = rows
    if steps:
        parts = [cache.rows[k] for k in keys]
    else:
        Xs = np.repeat(X, len(starts), axis=0)
        rays = _finite(_projected(geo, Xs, [_ray(geo, Xs, S[0, starts], lo[0, starts])]))
        parts = [part for k, ray in zip(keys, rays, strict=True) for part in (cache.rows[k], ray)]
    out = np.concatenate(parts)
    return out[None] if len(out) else np.full((1, 1, D), np.nan)
