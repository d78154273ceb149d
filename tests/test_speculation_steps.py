"""Round two's moves guessed by a student of the forest's corners while round one's call waits, on a model in
steps (learners/tabular/speculation.py, ``steps``; issue 56): the cached moves are ``_moves``' finite rows in
order however the cache was filled; the proposer with a student answers the same bits with the guess as without
it, one agent at a time against a model 100 ms away, and the guess is used."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from envs.black_box import BlackBoxModel, Budget
from learners.tabular import WorldGeometry, build_tabular_generator
from learners.tabular.corners import nearest_corners
from learners.tabular.moves import _moves
from learners.tabular.speculation import (
    ANSWER_PIECES,
    MoveCache,
    _piece,
    _step_rows,
    answer_piece,
    cached_moves,
    speculate,
)
from tests.tabular_worlds import german_mace_labels, german_rejected, train_labels
from tests.test_speculation import same_answers_with_the_guess


@pytest.fixture(scope="module")
def german():
    """German forest's proposer with a small student of its corners (fitted on 60 drawn agents), and test agents."""
    world, _ = german_rejected()
    labels, train, test = german_mace_labels()
    params = {"max_epochs": 5, "student_agents": 60, "student_corners": 20, "student_use": "both"}
    gen = build_tabular_generator("proposer", params).fit(replace(world, model=BlackBoxModel(world.model)),
                                                          train_labels(labels, train))
    assert gen._in_steps() and gen.student_ is not None
    return world, gen, labels.X[test][:12]


def _finite(M: np.ndarray) -> np.ndarray:
    return M[~np.isnan(M).any(-1)]


@pytest.mark.parametrize("trades", [False, True])
def test_cached_step_moves_are_the_moves_finite_rows_in_order(german, trades):
    """Built now, or taken from a cache filled by another batch of starts in another order, the rows are
    ``_moves``' finite rows in steps, in the same order (the second route: the search's own builder)."""
    world, gen, X = german
    geo = WorldGeometry.of(world)
    rng = np.random.default_rng(2)
    for i in range(4):
        x = X[i:i + 1]
        S = nearest_corners(geo, x, gen.vocab_, 40)[0][:, [0, 5, 10, 20, 30, 39]]  # corners: real starts in steps
        S[0, 2] = np.nan  # a start that is not there moves nothing
        S[0, 4] = geo.project(x, (x + (S[0, 4] - x) * rng.uniform(0.3, 0.9))[:, None, :])[0, 0]  # a start off the vocabulary
        live = [t for t in range(6) if not np.isnan(S[0, t]).any()]
        assert len(live) >= 3
        want = _finite(_moves(geo, x, S, gen.vocab_, True, None, trades)[0])
        cold = cached_moves(MoveCache(), geo, x, S, gen.vocab_, None, trades, steps=True)[0]
        warm_cache = MoveCache()
        part = live[::-1][:2]  # two starts, filled together in another order
        for t, rows in zip(part, _step_rows(geo, x[0], S[0, part], gen.vocab_, trades), strict=True):
            warm_cache.rows[MoveCache.key(S[0, t], trades)] = rows
        warm = cached_moves(warm_cache, geo, x, S, gen.vocab_, None, trades, steps=True)[0]
        assert len(want) and np.array_equal(want, cold) and np.array_equal(want, warm)
        assert warm_cache.hits == 2 and warm_cache.misses == len(live) - 2


def test_speculate_in_steps_fills_the_cache_and_stops_when_told(german):
    world, gen, X = german
    geo = WorldGeometry.of(world)
    C = gen.student_.picks(geo, X[:1], gen.vocab_, 24, pool=400, threshold=0.05)
    cache = MoveCache()
    speculate(cache, geo, X[0], C, gen.student_.margin, 0.0, (0.0, 1.0, -1.0), 3, gen.vocab_, False, steps=True)
    assert len(cache.rows) >= 1
    stopped = MoveCache()
    stopped.stop.set()
    speculate(stopped, geo, X[0], C, gen.student_.margin, 0.0, (0.0,), 3, gen.vocab_, False, steps=True)
    assert not stopped.rows


@pytest.mark.parametrize("budget", [Budget(2, 256), Budget(3, 400)])
def test_the_students_guess_changes_no_answer_and_is_used(german, budget, monkeypatch):
    """Each agent alone, the model 100 ms away (time for a guess on a loaded machine; the helper first builds the corners and the near picks): the same answers, distances and rows scored with the student's
    guess as without it, and some starts' moves came from the cache."""
    world, gen, X = german

    def run():
        bb = BlackBoxModel(world.model, latency_s=0.1)  # one model: its calls' time is known after the first
        w = replace(world, model=bb)
        out = []
        for i in range(len(X)):
            with bb.budget(budget):
                out.append(gen.recommend_within(w, X[i:i + 1], budget))
        return out

    caches, _ = same_answers_with_the_guess(monkeypatch, run)
    assert sum(len(c.pieces) for c in caches) > sum(c.piece_misses for c in caches)  # the guessed answers' pieces
    if budget.calls == 3:  # and some came from the guess (this small student guesses round two's best answer
        assert sum(c.piece_hits for c in caches) > 0  # right only in the longer search: 0 of 40 at 2 x 256)


@pytest.mark.parametrize("trades", [False, True])
def test_the_guessed_answers_pieces_are_the_pieces(german, trades):
    """``speculate`` in steps builds its guessed best answer's pieces (``fine`` only where round two is the last:
    not ``trades``); each is the piece built now, bit for bit (the second route: ``_piece``), and ``answer_piece``
    hands the cached rows back as a copy, counted as a hit (a piece not guessed: built, counted as a miss)."""
    world, gen, X = german
    geo = WorldGeometry.of(world)
    from learners.tabular.first_round import screens

    for i in range(3):
        x = X[i:i + 1]
        Sc = screens(geo, x, gen.vocab_)
        C = gen.student_.picks(geo, x, gen.vocab_, 24, pool=400, threshold=0.05)
        cache = MoveCache()
        # the logit shifted up by 10: every pick guessed accepted, the nearest the guessed best answer
        speculate(cache, geo, x[0], C, gen.student_.margin, 0.0, (10.0,), 3, gen.vocab_, trades, steps=True,
                  screens=lambda Sc=Sc: Sc)
        names = {name for name, _ in cache.pieces}
        assert names == set(ANSWER_PIECES) - ({"fine"} if trades else set())
        B = np.frombuffer(next(iter(cache.pieces))[1], float)[None]  # the guessed best answer
        for name in names:
            got = answer_piece(cache, name, geo, x, B, gen.vocab_, Sc)
            want = _piece(name, geo, x, B, gen.vocab_, Sc)
            assert np.array_equal(got, want, equal_nan=True)
            got[:] = 0.0  # a copy: the cache keeps its rows
        assert cache.piece_hits == len(names) and cache.piece_misses == 0
        far = B + 0.5 * (np.abs(B - x) > 0)  # another answer: built now
        answer_piece(cache, "edges", geo, x, far, gen.vocab_)
        assert cache.piece_misses == 1

def test_the_call_start_is_the_first_set():
    """``CallStart.at``: when the call started (its first ``set``), kept when set again as the call ends."""
    from learners.tabular.helper_thread import CallStart

    go = CallStart()
    assert not go.is_set() and np.isnan(go.at)
    go.set()
    first = go.at
    go.set()
    assert go.is_set() and go.at == first and np.isfinite(first)
