"""benchmarks/blackbox_fresh.py: which agents are fresh, its argument checks and its table (the measurement
itself is a benchmark)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.blackbox_fresh import main, report
from benchmarks.tabular_generators import fresh_agents


class _Threshold:
    """A world whose model rejects the rows with a negative first column."""

    def accepts(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(X)[:, 0] >= 0.0


def _cell(X_test: np.ndarray, sample: np.ndarray) -> SimpleNamespace:
    return SimpleNamespace(build=SimpleNamespace(world=_Threshold(), data=SimpleNamespace(X_test=X_test)), test=sample)


def test_fresh_agents_are_rejected_test_rows_outside_the_held_out_sample_in_a_seeded_order():
    X = np.column_stack([np.arange(-10.0, 10.0), np.arange(20.0)])
    c = _cell(X, X[[0, 3, 5]])
    fresh = fresh_agents(c, 100, seed=0)
    assert len(fresh) == 10 - 3 and (fresh[:, 0] < 0).all()
    assert not {r.tobytes() for r in fresh} & {r.tobytes() for r in c.test}
    np.testing.assert_array_equal(fresh_agents(c, 4, seed=0), fresh[:4])  # a prefix: a smaller run is in a larger
    assert not np.array_equal(fresh_agents(c, 7, seed=1), fresh)


def test_the_table_shows_held_out_and_fresh_per_budget():
    cell = {"cell": "credit/forest", "seed": 0, "agents": {"held-out": 100, "fresh": 400}, "methods": {
        "proposer": {"fit_s": 1.0, "held-out 2x256": 0.88, "fresh 2x256": 0.71, "held-out 8x2000": 0.98,
                     "fresh 8x2000": 0.93}}}
    text = report([cell], ["2x256", "8x2000"], "python benchmarks/blackbox_fresh.py")
    assert "| cell | agents (held-out / fresh) | method | 2x256 held-out / fresh | 8x2000 held-out / fresh |" in text
    assert "| credit/forest | 100 / 400 | proposer | 0.880 / 0.710 | 0.980 / 0.930 |" in text
    # each cell's JSON keeps the command that wrote it: a report over cells from two runs names both
    other = {**cell, "cell": "credit/mlp", "command": "python benchmarks/blackbox_fresh.py --cells credit/mlp"}
    text = report([{**cell, "command": "python benchmarks/blackbox_fresh.py"}, other], ["2x256"], "unused")
    assert "Written by `python benchmarks/blackbox_fresh.py`; `python benchmarks/blackbox_fresh.py --cells credit/mlp`." in text
    assert "an earlier run (its command not recorded)" in report([cell], ["2x256"], "unused")


@pytest.mark.parametrize("argv, message", [(["--methods", "magic"], "--methods: expected some of"),
                                           (["--budgets", "2x25x6"], "--budgets: expected RxN items")])
def test_bad_arguments_name_the_flag(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(argv + ["--out", "/nonexistent/never-written"])
