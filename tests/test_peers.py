"""benchmarks/peers.py on a tiny cell: the raw space, our methods, the report, resuming; DiCE where installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import peers  # noqa: E402
from data_gen.classifiers import build  # noqa: E402


@pytest.fixture(scope="module")
def german():
    return build("german", "forest", seed=0)


def test_raw_space_round_trip(german):
    space = peers.RawSpace(german.world)
    X = german.data.X_test[:50]
    R = space.to_raw(X)
    assert R.shape == (50, len(space.names)) and np.array_equal(space.from_raw(R), X)
    assert "personal_status_sex" in space.names and not space.numeric[space.names.index("personal_status_sex")]
    assert space.mutability[space.names.index("age")] == "increase" and space.integral[space.names.index("age")]


def test_counted_model_forwards(german):
    c = peers.Counted(german.world.model)
    X = german.data.X_test[:7]
    assert np.array_equal(c.predict(X), german.world.model.predict(X)) and (c.calls, c.rows) == (1, 7)
    assert c.exact == german.world.model.exact  # attributes the generators read pass through


def test_tiny_cell_and_resume(tmp_path, capsys):
    argv = ["--datasets", "german", "--models", "forest", "--agents", "3", "--diverse-agents", "2",
            "--label-agents", "12", "--peers", "--no-make-venv", "--out", str(tmp_path / "peers")]
    peers.main(argv)
    cells = list((tmp_path / "peers" / "cells").glob("*.json"))
    assert len(cells) == 1
    cell = json.loads(cells[0].read_text())
    assert cell["agents"] == 3 and set(cell["summary"]) == {"mace", "geco", "md_pso", "generator", "served"}
    mace = cell["summary"]["mace"]
    assert mace["valid_count"] == 3 and mace["violations"] == 0 and mace["ratio_median"] == pytest.approx(1.0)
    assert cell["summary"]["generator"]["violations"] == 0  # projected and verified by construction
    assert cell["training"]["generator"]["labelled"] > 0
    assert set(cell["diversity"]) == {"mace", "md_pso", "generator"} and cell["diverse_agents"] == 2
    report = (tmp_path / "peers.md").read_text()
    assert "german × forest" in report and "MACE (certified)" in report
    cells[0].write_text(json.dumps({**cell, "test_accuracy": 0.123}))  # a rerun reads the finished cell
    peers.main(argv)
    assert "0.123" in (tmp_path / "peers.md").read_text()


@pytest.mark.optional
def test_dice_on_tiny_cell(german):
    pytest.importorskip("dice_ml")
    world, space = german.world, peers.RawSpace(german.world)
    agents = peers.sample(world, german.data.X_test, 2, 0)
    peer = peers.DicePeer("random", world, space, german.data.X_train, 0)
    scorer = peers.CounterfactualScorer(n_diverse=1, plaf=peers.Plaf()).fit(world, german.data.X_train)
    for x in agents:
        rows, extra = peer.solve(x, 1)
        assert extra["model_calls"] > 0 and extra["model_rows"] >= extra["model_calls"]
        m = scorer.score(x, peers.as_recourses(x, rows, "dice_random", 0.0))
        assert m["returned"] == len(rows)
        if len(rows):  # DiCE keeps immutables: credit_history, personal_status_sex, foreign_worker
            for name in ("credit_history", "personal_status_sex", "foreign_worker"):
                j = space.names.index(name)
                assert space.to_raw(rows)[0, j] == space.to_raw(x)[0, j]


def test_importing_the_benchmark_leaves_the_environment_alone():
    """It once set TQDM_DISABLE on import, which silenced the progress lines of every later
    subprocess of the test session (test_scripts' train.py)."""
    import importlib
    import os
    import subprocess

    before = dict(os.environ)
    importlib.reload(peers)
    assert dict(os.environ) == before
    out = subprocess.run([sys.executable, "-c", "import os, benchmarks.peers; print(os.environ.get('TQDM_DISABLE'))"],
                         cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"
