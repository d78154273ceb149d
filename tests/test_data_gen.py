import json

import numpy as np
import pytest

import data_gen.labelling as labelling
from data_gen.config import SyntheticDatasetConfig
from data_gen.dataset import build_dataset, load_dataset
from data_gen.encodings import (
    CfeVocabulary,
    decode_full_action,
    decode_named_action,
    full_action,
    named_action,
)
from data_gen.splits import filter_mask, train_test_split
from data_gen.statistics import dataset_statistics, format_table
from data_gen.synthetic import make_world, sample_agents, threshold_variant
from evaluation.config import parse_config
from solvers.setcover_fast import FastSetCover

SMALL = dict(n_features=10, n_actions=20, n_agents=3000, seed=3, chunk_size=1000)


def test_world_generation_follows_the_paper():
    cfg = SyntheticDatasetConfig(n_features=20, n_actions=100, n_agents=10)
    world = make_world(cfg, np.random.default_rng(0))
    assert world.actions.shape == (100, 20) and world.actions.any(1).all()
    # action cost = sum of its active coordinates' integer costs in [1, n]
    coord, *_ = np.linalg.lstsq(world.actions.astype(float), world.costs, rcond=None)
    assert np.allclose(world.actions @ np.round(coord), world.costs)
    assert 0.4 < world.actions.mean() < 0.6
    X, groups = sample_agents(cfg, world, np.random.default_rng(1))
    assert X.shape == (10, 20) and groups is None


@pytest.mark.parametrize("name,ones", [("all_ones", range(20)), ("first5", range(5)), ("last5", range(15, 20)),
                                       ("first10", range(10)), ("last10", range(10, 20)), ("mid5", range(7, 12))])
def test_threshold_variants(name, ones):
    assert np.flatnonzero(threshold_variant(name, 20)).tolist() == list(ones)


def test_group_settings():
    manual = make_world(SyntheticDatasetConfig(groups="manual", n_actions=40, manual_fraction=0.25),
                        np.random.default_rng(0))
    assert manual.access.shape == (5, 40) and (manual.access.sum(1) == 10).all()
    prob = make_world(SyntheticDatasetConfig(groups="probabilistic", n_actions=200), np.random.default_rng(0))
    assert prob.n_actions == 1000 and (prob.access.sum(1) == 200).all()
    density = [prob.actions[prob.access[g]].mean() for g in range(5)]
    assert np.all(np.diff(density) > 0)  # pa = 0.4 ... 0.8
    mix = make_world(SyntheticDatasetConfig(classifier="mix"), np.random.default_rng(0))
    assert mix.n_groups == 5 and mix.classifier.thresholds.shape == (5, 20)


@pytest.mark.parametrize("bad,field", [({"pf": 1.5}, "pf"), ({"bogus": 1}, "bogus"),
                                       ({"groups": "probabilistic", "group_pa": [0.5]}, "group_pa"),
                                       ({"groups": "manual", "classifier": "mix"}, "classifier"),
                                       ({"n_features": 0}, "n_features"), ({"classifier": "first10", "n_features": 8},
                                                                           "classifier")])
def test_config_errors_name_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        parse_config({"name": "x", "dataset": bad})


def test_build_reuse_rebuild_and_manifest(tmp_path):
    cfg = SyntheticDatasetConfig(**SMALL)
    ds = build_dataset(cfg, tmp_path, "small", progress=False)
    m = ds.manifest
    assert m["config"]["n_features"] == 10 and m["seed"] == 3 and len(m["content_hash"]) == 64
    assert m["statistics"]["size"] == len(ds) == sum(m["statistics"]["by_length"].values())
    assert m["generated"] == 3000 == len(ds) + sum(m["dropped"].values())
    stamp = (ds.path / "agents.parquet").stat().st_mtime_ns
    again = build_dataset(cfg, tmp_path, "small", progress=False)
    assert again.path == ds.path and (ds.path / "agents.parquet").stat().st_mtime_ns == stamp
    changed = build_dataset(SyntheticDatasetConfig(**{**SMALL, "pf": 0.6}), tmp_path, "small", progress=False)
    assert changed.path != ds.path
    # kept agents: negative, unique optimum, at most 3 actions, labels match the solver
    assert not ds.world.accepts(ds.X).any()
    assert (ds.length >= 1).all() and (ds.length <= 3).all()
    lab = FastSetCover().label_batch(ds.world, ds.X)
    assert (lab.n_optimal == 1).all() and np.allclose(lab.cost, ds.cost)
    assert np.array_equal(lab.actions[:, :3], ds.sets)


def test_tampered_dataset_is_refused(tmp_path):
    ds = build_dataset(SyntheticDatasetConfig(**SMALL), tmp_path, "small", progress=False)
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(ds.path / "agents.parquet")
    table = table.set_column(table.schema.get_field_index("cost"), "cost", pc.add(table.column("cost"), 1.0))
    pq.write_table(table, ds.path / "agents.parquet")
    with pytest.raises(ValueError, match="content hash"):
        load_dataset(ds.path)
    (ds.path / "agents.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="cannot read"):
        load_dataset(ds.path)


def test_interrupted_labelling_resumes(tmp_path, monkeypatch):
    cfg = SyntheticDatasetConfig(**SMALL)
    reference = build_dataset(cfg, tmp_path / "ref", "small", progress=False)
    calls = {"n": 0}
    real = labelling._label_chunk

    def flaky(shared, chunk):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # interrupted after the first chunk
        return real(shared, chunk)

    monkeypatch.setattr(labelling, "_label_chunk", flaky)
    with pytest.raises(KeyboardInterrupt):
        build_dataset(cfg, tmp_path / "run", "small", progress=False)
    chunks = sorted((tmp_path / "run").glob("*/chunks/chunk_*.npz"))
    assert len(chunks) == 1
    monkeypatch.setattr(labelling, "_label_chunk", real)
    resumed = build_dataset(cfg, tmp_path / "run", "small", progress=False)
    assert np.array_equal(resumed.sets, reference.sets) and np.array_equal(resumed.X, reference.X)
    assert resumed.manifest["content_hash"] == reference.manifest["content_hash"]


def test_encodings_round_trip():
    sets = np.array([[1, 5, -1], [0, -1, -1], [2, 3, 4]])
    assert np.array_equal(decode_named_action(named_action(sets, 6), 3), sets)
    acts = np.random.default_rng(0).random((6, 9)) < 0.5
    acts[:, 0] = np.arange(6) % 2 == 0  # distinct vectors
    acts = np.unique(acts, axis=0)[:6] if len(np.unique(acts, axis=0)) >= 6 else np.eye(6, 9, dtype=bool)
    fa = full_action(sets, acts, 3)
    assert fa.shape == (3, 4, 10)
    assert fa[1, 1, -1] == 1 and fa[0, 2, -1] == 1 and fa[2, 3, -1] == 1  # stop after the last action
    assert np.array_equal(decode_full_action(fa, acts)[:, :3], sets)
    vocab = CfeVocabulary(sets, [f"a{i}" for i in range(6)])
    assert vocab.names_ == ["a0", "a1+a5", "a2+a3+a4"]
    assert np.array_equal(vocab.decode(vocab.encode(sets)), sets)
    assert vocab.encode(np.array([[1, 2, -1]]))[0] == -1


def test_filters_and_stratified_split():
    rng = np.random.default_rng(0)
    cls = np.repeat(np.arange(30), rng.integers(1, 120, 30))
    keep = filter_mask(cls, ">40")
    counts = np.bincount(cls)
    assert set(np.unique(cls[keep])) == set(np.flatnonzero(counts > 40))
    train, test = train_test_split(cls[keep], 0.2, seed=1, stratify=True)
    assert len(np.intersect1d(train, test)) == 0 and len(train) + len(test) == keep.sum()
    assert np.bincount(cls[keep][train])[np.unique(cls[keep])].min() >= 20
    again = train_test_split(cls[keep], 0.2, seed=1, stratify=True)
    assert np.array_equal(again[0], train)
    with pytest.raises(ValueError, match="filter"):
        filter_mask(cls, "more than ten")


def test_statistics_table(tmp_path):
    ds = build_dataset(SyntheticDatasetConfig(**SMALL), tmp_path, "small", progress=False)
    s = dataset_statistics(ds)
    assert s["filters"]["all"] >= s["filters"][">10"] >= s["filters"][">40"]
    assert 0 <= s["train_share_cfes_seen_once_pct"] <= 100
    assert "| small |" in format_table([("small", s)])
    json.dumps(s)


def test_progress_is_a_bar_on_a_terminal_and_sparse_lines_elsewhere():
    import io

    from data_gen.progress import LineProgress, interactive, progress_bar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    log, terminal = io.StringIO(), Terminal()
    assert interactive(terminal) and not interactive(log)
    for stream in (log, terminal):
        bar = progress_bar(total=500, desc="labelling", unit="agent", file=stream, mininterval=0)
        for _ in range(500):
            bar.update(1)
        bar.close()
    assert isinstance(progress_bar(total=1, file=io.StringIO()), LineProgress)
    assert "\r" in terminal.getvalue()  # a live bar redraws in place
    text = log.getvalue()
    assert "\r" not in text  # a log gets whole lines: the start and the end (at most one per 30 s between)
    assert text.splitlines() == ["labelling:   0% (0/500) [00:00<?, ?agent/s]", text.splitlines()[-1]]
    assert text.splitlines()[-1].startswith("labelling: 100% (500/500)")
    silent = io.StringIO()
    assert list(progress_bar(range(3), enabled=False, file=silent)) == [0, 1, 2] and silent.getvalue() == ""


def test_data_gen_reads_experiment_files_without_the_learners_layer(tmp_path):
    """data_gen sits below learners: it reads an experiment's dataset part itself (the stats CLI)."""
    import subprocess
    import sys

    from data_gen.config import load_data_section

    path = tmp_path / "exp.yaml"
    path.write_text("name: exp\ndataset: {n_features: 8, n_actions: 12}\ngenerators: [{method: named_cfe}]\n")
    section = load_data_section(path)
    assert (section.dataset_name, section.data_dir, section.dataset.n_features) == ("exp", "data_cache", 8)
    assert section.dataset == parse_config({"name": "exp", "dataset": {"n_features": 8, "n_actions": 12}}).dataset
    path.write_text("name: exp\ndataset: {n_features: 8, colour: red}\n")
    with pytest.raises(ValueError, match="dataset.colour: unknown key"):
        load_data_section(path)
    code = ("import importlib, pkgutil, sys, data_gen\n"
            "for m in pkgutil.iter_modules(data_gen.__path__): importlib.import_module(f'data_gen.{m.name}')\n"
            "print(sorted({n.split('.')[0] for n in sys.modules} & {'learners', 'serving'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
