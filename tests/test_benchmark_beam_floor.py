"""Smoke test of ``benchmarks/sequential_beam_floor.py`` on a tiny German run (CleanRL-style: the
script end to end with tiny budgets) and of the search statistics it reads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from envs.sequential_candidates import FlatGrid
from envs.sequential_env import default_world

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("sequential_beam_floor", ROOT / "benchmarks" / "sequential_beam_floor.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_beam_floor_script(tmp_path):
    from evaluation.sequential_experiment import load_sequential_config, train_sequential

    cfg_path = tmp_path / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump({
        "name": "tiny_german", "world": "german", "agents": 14, "test_agents": 6, "sequencer_generations": 2,
        "output_dir": str(tmp_path / "runs"), "labels_root": str(tmp_path / "labels"), "n_jobs": 1,
        "policies": [{"method": "seq_bc", "params": {"bc_epochs": 1}},
                     {"method": "seq_lookahead", "name": "lookahead2", "params": {"depth": 2}}]}))
    run_dir = train_sequential(load_sequential_config(cfg_path), progress=False, log=lambda *_: None)
    out = tmp_path / "floor.md"
    mod = _script()
    assert mod.main(["--run", str(run_dir), "--model", "seq_bc", "--seeds", "0", "--widths", "1", "3",
                     "--repeats", "1", "--out", str(out)]) == 0
    res = json.loads(out.with_suffix(".json").read_text())[0]
    world, _ = default_world("german")
    K = FlatGrid.of(world).size
    raw, beam = res["widths"]
    assert (raw["width"], beam["width"]) == (1, 3)
    for row in (raw, beam):
        # every expanded state computes its whole grid of children
        assert row["scored_per_agent"] == pytest.approx(row["nodes_per_agent"] * K)
        assert row["cpu_ms_per_agent"] > 0 and row["floor_ms_per_agent"] > 0
        assert row["classifier_ms"] > 0 and row["scorer_ms"] > 0
        assert 0 < row["cost_to_baseline"] < 100
    assert beam["nodes_per_agent"] > raw["nodes_per_agent"]
    assert "| 3 |" in out.read_text()
    with pytest.raises(FileNotFoundError, match="not trained"):
        mod.main(["--run", str(run_dir), "--model", "nope", "--seeds", "0", "--out", str(out)])
