"""``budget_search`` builds round two's rows that depend on the agents alone (their screens and nearest
corners) on a helper thread while round one's call waits on the model (issue 56: a remote model's request
is its round trips plus what is computed between them). The answers must be those of building them after
the call, and the building must happen during it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import learners.tabular.budget_search as bs
from envs.black_box import BlackBoxModel, Budget
from learners.tabular import WorldGeometry, build_tabular_generator, helper_thread
from tests.tabular_worlds import german_train_split


@pytest.fixture(scope="module")
def german():
    world, labels, test = german_train_split()
    gen = build_tabular_generator("proposer", {"proposals": "averages"}).fit(world, labels)
    return world, gen, test


def _search(world, gen, X: np.ndarray, budget: Budget, model=None) -> bs.SearchResult:
    geo = WorldGeometry.of(world)
    return bs.budget_search(model or BlackBoxModel(world.model), geo, X, gen.candidates(world, X), budget,
                            vocab=gen.vocab_, steps=gen._in_steps(), grid_share=gen._grid_share(),
                            donors=lambda a, start, k: gen._donor_rows(X[a], start, k))


@pytest.mark.slow
@pytest.mark.parametrize("budget", [Budget(2, 256), Budget(4, 600)])
def test_rows_built_ahead_give_the_answers_built_after(german, budget, monkeypatch):
    """With the helper thread and without it (``AHEAD_AGENTS = 0``), the same answers and rows scored, for
    one agent and for a batch."""
    world, gen, test = german
    assert gen._in_steps()  # German forest: the corners are among the rows built ahead
    for X in (test[:1], test[:10]):
        ahead = _search(world, gen, X, budget)
        monkeypatch.setattr(bs, "AHEAD_AGENTS", 0)
        after = _search(world, gen, X, budget)
        monkeypatch.undo()
        np.testing.assert_array_equal(ahead.CF, after.CF)
        np.testing.assert_array_equal(ahead.rows, after.rows)


def test_rows_are_built_while_round_one_waits(german, monkeypatch):
    """A model that takes 0.3 s a call: the agents' own rows are built on another thread, started before the
    first call returns and finished before it does (the request does not wait for them)."""
    world, gen, test = german
    calls, built = [], []
    plain = BlackBoxModel(world.model)

    class Slow:
        def predict_proba(self, R):
            t = time.perf_counter()
            time.sleep(0.3)
            calls.append((t, time.perf_counter()))
            return plain.predict_proba(R)

    own = bs._agents_own_rows

    def recording(*args, **kwargs):
        t = time.perf_counter()
        out = own(*args, **kwargs)
        built.append((threading.current_thread() is not threading.main_thread(), t, time.perf_counter()))
        return out

    monkeypatch.setattr(bs, "_agents_own_rows", recording)
    res = _search(world, gen, test[:1], Budget(2, 256), Slow())
    assert len(built) == 1 and len(calls) == 2
    helper, start, end = built[0]
    assert helper and start < calls[0][1] and end < calls[0][1]
    assert res.found[0] and world.accepts(res.CF[:1]).all()


def test_a_forked_child_builds_ahead_on_its_own_threads(german):
    """A process forked after the parent searched (multiprocessing's fork, a server's workers) inherits no
    helper threads: its search must not wait on the parent's pool."""
    import multiprocessing as mp

    world, gen, test = german
    parent = _search(world, gen, test[:1], Budget(2, 256))
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as pool:
        child = pool.apply_async(_child_search, (world, gen, test[:1])).get(timeout=60)
    np.testing.assert_array_equal(child, parent.CF)


def _child_search(world, gen, X):
    return _search(world, gen, X, Budget(2, 256)).CF


def test_no_helper_thread_while_another_search_runs(german, monkeypatch):
    """With another search in flight in the process (a served model's concurrent requests), the waits are not
    idle: the rows are built on the search's own thread, after the call; the count is back to 0 afterwards."""
    world, gen, test = german
    built = []
    own = bs._agents_own_rows

    def recording(*args, **kwargs):
        built.append(threading.current_thread() is threading.main_thread())
        return own(*args, **kwargs)

    monkeypatch.setattr(bs, "_agents_own_rows", recording)
    assert helper_thread._RUNNING[0] == 0
    helper_thread._RUNNING[0] += 1  # another search
    try:
        _search(world, gen, test[:1], Budget(2, 256))
    finally:
        helper_thread._RUNNING[0] -= 1
    assert built == [] and helper_thread._RUNNING[0] == 0  # built inline: screens() and nearest_corners() directly


def test_an_error_before_the_call_leaves_no_helper_job_waiting(german, monkeypatch):
    """The helper's jobs wait for the call to start; an error between their submission and the call must release
    them, or every later search of the process waits behind them for ever (CI hung so once)."""
    world, gen, test = german

    def broken(*args, **kwargs):
        raise RuntimeError("broken before the call")

    monkeypatch.setattr(bs, "_guess", broken)
    with pytest.raises(RuntimeError, match="broken before the call"):
        _search(world, gen, test[:1], Budget(2, 256))
    monkeypatch.undo()
    out = []
    later = threading.Thread(target=lambda: out.append(_search(world, gen, test[:1], Budget(2, 256))), daemon=True)
    later.start()
    later.join(timeout=60)
    assert not later.is_alive() and out and out[0].calls <= 2
