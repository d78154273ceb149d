"""Smoke tests: the scripts run end to end on tiny budgets."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, cwd):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def _config(tmp_path, **extra):
    cfg = {"name": "tiny", "data_dir": str(tmp_path / "data"), "output_dir": str(tmp_path / "runs"),
           "dataset": {"n_features": 8, "n_actions": 12, "n_agents": 1500, "seed": 1},
           "generators": [{"method": "hamming_knn", "params": {"k": 3}},
                          {"method": "named_cfe", "name": "MC", "params": {"hidden": [32], "max_epochs": 2}}],
           "evaluation": {"filters": ["all", ">10"], "solver_timing_agents": 20}, **extra}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tiny config trained once by train.py (progress on, as a user runs it): its folder, config and output."""
    tmp_path = tmp_path_factory.mktemp("tiny")
    cfg = _config(tmp_path)
    return tmp_path, cfg, _run(str(ROOT / "train.py"), str(cfg), cwd=tmp_path)


@pytest.mark.slow
def test_train_then_evaluate(trained):
    tmp_path, cfg, out = trained
    assert out.returncode == 0, out.stderr
    assert "| hamming_knn [all]" in out.stdout
    # Off a terminal (a pipe here, as in CI or a log file) progress is whole lines, never bar redraws:
    # the labelling's start and end, and one line per epoch of each MC model (2 filters x 2 epochs).
    assert "\r" not in out.stdout + out.stderr
    lines = out.stderr.splitlines()
    assert [line.split(",")[0] for line in lines if line.startswith("epoch ")] == ["epoch 1/2", "epoch 2/2"] * 2
    assert all("val_loss" in line for line in lines if line.startswith("epoch "))
    labelling = [line for line in lines if line.startswith("labelling")]
    assert len(labelling) >= 2 and "100%" in labelling[-1]
    run = tmp_path / "runs" / "tiny"
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics["models"]) == {"hamming_knn [all]", "hamming_knn [>10]", "MC [all]", "MC [>10]"}
    mc = metrics["models"]["MC [all]"]["seeds"][0]
    # unique optima, order-blind costs: if the argmax is right, the cheapest accepted candidate is it
    assert mc["verified_top_k"]["accuracy"] >= mc["accuracy"]["value"] - 1e-12
    assert "verified top-k" in (run / "report.md").read_text()
    assert 0.0 <= metrics["models"]["hamming_knn [all]"]["accuracy_mean"] <= 1.0
    # accuracy on the test agents whose x is not in training, beside the overall figure
    split = metrics["filters"]["all"]
    assert 0 < split["unseen_agents"] <= split["test_agents"] and "group_blind_ceiling" not in split
    assert mc["accuracy_unseen"]["n"] == split["unseen_agents"]
    assert "unseen x" in (run / "report.md").read_text() and "×" in (run / "report.md").read_text()
    assert (run / "report.md").exists() and (run / "plots" / "accuracy_by_length.png").exists()
    again = _run(str(ROOT / "evaluate.py"), str(run), "--no-plots", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    stats = _run("-m", "data_gen.stats", str(cfg), "--json", cwd=ROOT)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["tiny"]["size"] == metrics["dataset"]["size"]


@pytest.mark.slow
def test_bad_config_is_a_clear_error(tmp_path):
    cfg = _config(tmp_path, dataset={"n_features": 8, "pf": 2.0, "colour": "red"})
    out, missing = _run_all([(str(ROOT / "train.py"), str(cfg)),
                             (str(ROOT / "evaluate.py"), str(tmp_path / "nowhere"))], tmp_path)
    assert out.returncode == 2
    assert "dataset.pf" in out.stderr and "dataset.colour: unknown key" in out.stderr
    assert "Traceback" not in out.stderr
    assert missing.returncode == 2 and "not a run directory" in missing.stderr


def _one_line_error(out, script: str, *needles: str) -> None:
    """Exit status 2 and a single stderr line that names the problem: no traceback."""
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert all(n in lines[0] for n in needles), lines[0]


def test_help_is_complete(tmp_path):
    """Every script documents every option it takes, its exit codes, and runs without extras."""
    expected = {"train.py": ["--no-eval", "--quiet", "config", "Exit status"],
                "evaluate.py": ["--no-plots", "--filters", "run_dir", "Exit status"],
                "serve.py": ["--model", "--port", "--batch-in", "--batch-out", "--ray",
                             "--fallback-budget-ms", "--max-batch"]}
    outs = _run_all([(str(ROOT / script), "--help") for script in expected], tmp_path)
    for (script, options), out in zip(expected.items(), outs, strict=True):
        assert out.returncode == 0 and out.stdout.startswith("usage:"), out.stderr
        assert all(o in out.stdout for o in options), (script, out.stdout)


def _run_all(calls: list[tuple], cwd) -> list:
    """The scripts of ``calls`` (argument tuples) run two at a time (each pays its imports: ~5 s)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda args: _run(*args, cwd=cwd), calls))


@pytest.mark.slow
def test_scripts_fail_politely(tmp_path, trained):
    """A missing run directory, a config typo and an untrained run: one line and exit status 2."""
    nowhere = str(tmp_path / "nowhere")
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: t\ngenerators:\n  - method: named_cfee\n")
    missing, ev, sv, typo_out = _run_all([
        (str(ROOT / "train.py"), str(tmp_path / "missing.yaml")), (str(ROOT / "evaluate.py"), nowhere),
        (str(ROOT / "serve.py"), nowhere), (str(ROOT / "train.py"), str(typo))], tmp_path)
    _one_line_error(missing, "train.py", "missing.yaml", "does not exist")
    _one_line_error(ev, "evaluate.py", "not a run directory")
    _one_line_error(sv, "serve.py", "not a trained run directory")
    assert typo_out.returncode == 2 and "named_cfee" in typo_out.stderr and "Traceback" not in typo_out.stderr
    assert trained[2].returncode == 0, trained[2].stderr
    run = Path(shutil.copytree(trained[0] / "runs" / "tiny", tmp_path / "runs" / "tiny"))
    shutil.rmtree(run / "models")  # an interrupted or untrained run
    calls, expect = [(str(ROOT / "evaluate.py"), str(run)), (str(ROOT / "serve.py"), str(run))], \
        [("evaluate.py", "missing", "run train.py"), ("serve.py", "not trained")]
    for kind in ("sequential_german", "german_forest"):  # unfinished runs of the other two families
        d = tmp_path / kind
        d.mkdir()
        shutil.copy(ROOT / "configs" / f"{kind}.yaml", d / "config.yaml")
        calls += [(str(ROOT / "evaluate.py"), str(d)), (str(ROOT / "serve.py"), str(d))]
        expect += [("evaluate.py", "missing"), ("serve.py", "missing")]
    for out, (script, *needles) in zip(_run_all(calls, tmp_path), expect, strict=True):
        _one_line_error(out, script, *needles)
