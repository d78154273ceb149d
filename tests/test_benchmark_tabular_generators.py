"""benchmarks/tabular_generators.py end to end on one tiny cell: labels, curve, online searches, report, resume."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import tabular_generators as bench  # noqa: E402


@pytest.mark.slow
def test_one_tiny_cell_runs_and_resumes(tmp_path, capsys):
    args = ["--cells", "german/forest", "--sizes", "8,16", "--test-agents", "4", "--jobs", "1", "--quiet", "--epochs", "3",
            "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]
    bench.main(args)
    cell = json.loads((tmp_path / "out" / "tabular_generators" / "german_forest.json").read_text())
    assert [p["labels"] for p in cell["curve"]] == [8, 16]
    assert cell["real_training_rows"] == 16  # the real rejected rows come first
    assert cell["mace"]["timed_in_run"]["agents"] == 4  # MACE re-timed in the run, beside the generators
    for point in cell["curve"]:
        assert set(point["methods"]) == set(bench.METHODS)
        for m in point["methods"].values():
            assert m["validity"] in (None, 1.0) and 0 <= m["optimal_share"] <= 1
            assert m["calls_median"] >= 1 and m["calls_p95"] >= m["calls_median"] and m["speedup_vs_mace"] > 0
        assert point["label_cpu_hours"] > 0
    assert set(cell["online"]) == {"geco", "md_pso"}
    report = (tmp_path / "out" / "tabular_generators.md").read_text()
    assert "k-NN (no learning)" in report and "MACE (certified)" in report and "GeCo (online)" in report
    assert (tmp_path / "out" / "tabular_generators" / "learning_curve.png").stat().st_size > 0
    assert (tmp_path / "out" / "tabular_generators" / "frontier.png").stat().st_size > 0
    # --force --keep-online: the generators again (labels from the cache), the online searches kept
    (tmp_path / "out" / "tabular_generators.md").unlink()
    bench.main(args + ["--force", "--keep-online"])
    again = json.loads((tmp_path / "out" / "tabular_generators" / "german_forest.json").read_text())
    assert again["online"] == cell["online"] and (tmp_path / "out" / "tabular_generators.md").exists()
    # a rerun reads the finished cell instead of computing it again
    (tmp_path / "cache").rename(tmp_path / "gone")
    capsys.readouterr()
    bench.main(args)
    assert "labels ready" not in capsys.readouterr().out


def test_labels_only_fills_the_cache_the_benchmark_resumes_from(tmp_path, capsys):
    """``--labels-only`` (run where there are more cores) writes every label chunk; the benchmark then
    computes no label again (its chunks' times sum to ~0 s on resume)."""
    args = ["--cells", "german/forest", "--sizes", "10", "--test-agents", "4", "--jobs", "1", "--quiet", "--epochs", "2",
            "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out"), "--no-online"]
    bench.main(args + ["--labels-only"])
    assert "labels: {" in capsys.readouterr().out
    assert not (tmp_path / "out" / "tabular_generators").exists() or not any((tmp_path / "out" / "tabular_generators").glob("*.json"))
    chunks = sorted(p.relative_to(tmp_path) for p in (tmp_path / "cache").rglob("chunk_*.npz"))
    assert chunks and any("test" in str(p) for p in chunks) and any("train" in str(p) for p in chunks)
    stamps = {p: (tmp_path / p).stat().st_mtime_ns for p in chunks}
    bench.main(args)
    assert {p: (tmp_path / p).stat().st_mtime_ns for p in chunks} == stamps  # read, not redone
    assert json.loads((tmp_path / "out" / "tabular_generators" / "german_forest.json").read_text())["curve"]


def test_a_pool_larger_than_the_draws_allow_is_what_they_found():
    """COMPAS has few distinct rows: past a point the draws find no new rejected agent, and the pool
    is what they found (the curve records the agents drawn) rather than an error."""
    from data_gen.classifiers import build, negatives

    b = build("german", "forest")
    real = negatives(b.world, b.data.X_train)
    pool, n_real = bench.training_pool(b.world, b.data.X_train, len(real) + 10, 0,
                                       bench.PerturbParams(numeric_scale=0.0, resample_prob=0.0))
    assert n_real == len(real) and len(pool) == len(real)


def test_training_pool_is_real_rows_then_generated():
    from data_gen.classifiers import build, negatives

    b = build("german", "forest")
    real = negatives(b.world, b.data.X_train)
    pool, n_real = bench.training_pool(b.world, b.data.X_train, len(real) + 30, 0, bench.PerturbParams())
    assert n_real == len(real) and len(pool) == len(real) + 30
    assert {r.tobytes() for r in pool[:n_real]} == {r.tobytes() for r in real}
    assert not b.world.accepts(pool).any()
    first, _ = bench.training_pool(b.world, b.data.X_train, 25, 0, bench.PerturbParams())
    assert (first == pool[:25]).all()  # nested: a smaller budget is a prefix of a larger one
