"""benchmarks/tabular_generators.py past BASE_POOL: a larger budget extends the pool and the label cache."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import tabular_generators as bench  # noqa: E402
from data_gen.classifiers import build, negatives  # noqa: E402
from data_gen.perturbed_agents import perturb_agents  # noqa: E402


@pytest.fixture(scope="module")
def german():
    return build("german", "forest")


def _pool_before_tiers(world, X_train, n, seed, perturb):
    """training_pool as it was before the tiers (the caches of 2,000 labels hold its agents)."""
    real = negatives(world, X_train)
    real = real[np.random.default_rng(seed).permutation(len(real))]
    if n <= len(real):
        return real[:n], n
    extra = perturb_agents(world, real, n - len(real), seed=seed, params=perturb, allow_fewer=True)
    return np.concatenate([real, extra]), len(real)


def test_a_larger_pool_extends_a_smaller_one(german, monkeypatch):
    world, X = german.world, german.data.X_train
    monkeypatch.setattr(bench, "POOL_BLOCK", 7)
    p = bench.PerturbParams()
    real = negatives(world, X)
    base = len(real) + 5  # the first tier: the real rows and 5 drawn ones; past it, drawn blocks of 7
    for n in (40, base):  # up to the base tier: the pool of before, bit for bit
        old, old_real = _pool_before_tiers(world, X, n, 0, p)
        new, new_real = bench.training_pool(world, X, n, 0, p, base)
        assert np.array_equal(old, new) and old_real == new_real
    small, _ = bench.training_pool(world, X, base, 0, p, base)
    mid, _ = bench.training_pool(world, X, base + 10, 0, p, base)
    big, n_real = bench.training_pool(world, X, base + 30, 0, p, base)
    assert len(big) == base + 30 and n_real == len(real)
    assert np.array_equal(big[:base], small) and np.array_equal(big[: base + 10], mid)
    assert len({r.tobytes() for r in big}) == len(big) and not world.accepts(big).any()
    # a first tier of real rows only: the real rows past it come next, in the same seeded order
    few, _ = bench.training_pool(world, X, 20, 0, p, base=12)
    assert np.array_equal(few, _pool_before_tiers(world, X, 20, 0, p)[0])


def test_a_larger_budget_resumes_the_label_cache(tmp_path, monkeypatch, capsys):
    """--sizes-for CELL=...,n past BASE_POOL labels only the agents past the cached ones, in the same cache."""
    monkeypatch.setattr(bench, "BASE_POOL", 6)
    monkeypatch.setattr(bench, "LABEL_CHUNK", 2)
    cache = tmp_path / "cache"
    args = ["--cells", "german/forest", "--sizes", "6", "--test-agents", "2", "--jobs", "1", "--quiet",
            "--cache", str(cache), "--labels-only"]
    bench.main(args)
    (cell_dir,) = cache.iterdir()
    stamps = {p: p.stat().st_mtime_ns for p in cell_dir.rglob("chunk_*.npz")}
    assert len(list((cell_dir / "train").glob("chunk_*.npz"))) == 3
    capsys.readouterr()
    bench.main(args + ["--sizes-for", "german/forest=3,6,9"])
    out = capsys.readouterr().out
    assert [p.name for p in cache.iterdir()] == [cell_dir.name]  # the same cache directory
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # the 6 labels read, not redone
    assert sorted(p.name for p in (cell_dir / "train-more").glob("chunk_*.npz")) == ["chunk_00000.npz", "chunk_00001.npz"]
    assert "'sizes': [3, 6, 9]" in out and "'train': 9," in out
    c = bench.Cell.of("german/forest", bench.argparse.Namespace(
        sizes="6", sizes_for=["german/forest=9"], numeric_scale=0.05, resample_prob=0.15, seed=0, cache=str(cache),
        test_agents=2, jobs=1, quiet=True))
    labels, pool, _ = c.train_labels(bench.argparse.Namespace(seed=0, jobs=1, quiet=True))
    assert np.array_equal(labels.X, pool) and np.array_equal(pool, bench.training_pool(
        c.build.world, c.build.data.X_train, 9, 0, c.perturb)[0])
