"""Recourse audits (evaluation/audit.py): the bounds against brute force on a world whose every
optimum is enumerable, the bootstrap from bounds, the routes (labels, generator, MACE), resuming,
and evaluate.py --audit's polite errors."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier

from envs.models import from_sklearn
from envs.schema import Feature, FeatureSchema
from envs.tabular import TabularWorld
from evaluation.audit import audit_agents, bootstrap_bounds, summarize
from learners.tabular import TabularLabels, WorldGeometry, build_tabular_generator
from solvers.mace import MACE

ROOT = Path(__file__).resolve().parents[1]


def _schema() -> FeatureSchema:
    return FeatureSchema((
        Feature("a", "numeric", 0, 4, "free", integer=True),
        Feature("b", "ordinal", 0, 3, "increase", integer=True),
        Feature("sex", "binary", 0, 1, "immutable", integer=True),
        Feature("t", "binary", 0, 1, "free", integer=True),
        *(Feature(f"g={c}", "binary", 0, 1, "free", group="g", integer=True) for c in "xyz"),
    ))


def _all_states(schema: FeatureSchema) -> np.ndarray:
    """Every valid encoded state (the one-hot group as one feature): 5 * 4 * 2 * 2 * 3 = 240."""
    rows = []
    for a, b, s, t, g in itertools.product(range(5), range(4), range(2), range(2), range(3)):
        x = np.zeros(len(schema))
        x[:4] = a, b, s, t
        x[4 + g] = 1
        rows.append(x)
    return np.array(rows)


@pytest.fixture(scope="module")
def world_and_agents():
    schema = _schema()
    S = _all_states(schema)
    rng = np.random.default_rng(0)
    # the immutable attribute costs group 1 recourse: sex=1 lowers the score
    z = 0.7 * S[:, 0] + 0.9 * S[:, 1] - 1.2 * S[:, 2] + S[:, 3] + 1.1 * S[:, 4] - 0.8 * S[:, 6] - 3.2
    y = (z + rng.normal(0, 0.4, len(S)) > 0).astype(int)
    model = from_sklearn(RandomForestClassifier(3, max_depth=4, random_state=0).fit(S, y))
    world = TabularWorld("tiny/forest", schema, model)
    neg = S[~world.accepts(S)]
    agents = neg[np.random.default_rng(1).choice(len(neg), 24, replace=False)]
    return world, S, agents


def _brute(world: TabularWorld, S: np.ndarray, x: np.ndarray) -> float:
    geo = WorldGeometry.of(world)
    X = np.repeat(x[None], len(S), 0)
    ok = world.accepts(S) & ~geo.violations(X, S)
    return float(geo.distance(X[ok], S[ok]).min()) if ok.any() else np.inf


def _generator(world, S, agents):
    """A nearest-CFE generator fitted on the brute-force answers of agents outside the audit."""
    geo = WorldGeometry.of(world)
    pool = [x for x in S[~world.accepts(S)] if not (agents == x).all(1).any()][:12]
    X, CF = [], []
    for x in pool:
        Xr = np.repeat(x[None], len(S), 0)
        ok = world.accepts(S) & ~geo.violations(Xr, S)
        if ok.any():
            d = np.where(ok, geo.distance(Xr, S), np.inf)
            X.append(x)
            CF.append(S[int(np.argmin(d))])
    X, CF = np.array(X), np.array(CF)
    return build_tabular_generator("nearest_cfe").fit(world, TabularLabels(X, CF, geo.distance(X, CF)), seed=0)


def test_bounds_against_brute_force(world_and_agents, tmp_path):
    world, S, agents = world_and_agents
    truth = np.array([_brute(world, S, x) for x in agents])
    mace = MACE(backend="milp", norm="one", time_limit=20)
    out = audit_agents(world, agents, mace=mace, generator=_generator(world, S, agents), work_dir=tmp_path / "c",
                       chunk_size=8)
    has = np.isfinite(truth)
    assert (out.proven_none == ~has).all() and not out.unknown.any()
    assert (out.lower[has] <= truth[has] + 1e-9).all() and (truth[has] <= out.upper[has] + 1e-9).all()
    assert (out.upper[has] <= truth[has] * 1.01 + 1e-9).all()  # certified within 1%
    assert (out.cf[has][:, 2] == agents[has][:, 2]).all()  # the group attribute never changes
    assert (out.route == "mace").all() and out.gen_found.any()
    groups = {"sex": agents[:, 2].astype(int).astype(str)}
    m = summarize(out, world, groups, {"sex": [2]}, n_boot=300, seed=3, min_group=2)
    a = m["attributes"]["sex"]
    assert a["answers_changing_it"] == 0 and a["mutability"] == ["immutable"]
    for g, st in a["groups"].items():
        t = truth[has & (groups["sex"] == g)]
        lo, hi = st["cost_mean"]
        assert lo - 1e-12 <= t.mean() <= hi + 1e-12
        mlo, mhi = st["cost_median"]
        assert mlo - 1e-12 <= np.median(t) <= mhi + 1e-12
        assert st["with_recourse"] == len(t)
    # the comparison from the bounds contains the one computed on the true optima (same bootstrap draws)
    ref = a["reference"]
    for g, c in a["compared_to_reference"].items():
        ta, tb = truth[has & (groups["sex"] == g)], truth[has & (groups["sex"] == ref)]
        exact = bootstrap_bounds(ta, ta, tb, tb, n_boot=300, seed=3)
        assert c["ratio"][0] - 1e-12 <= ta.mean() / tb.mean() <= c["ratio"][1] + 1e-12
        assert c["ratio_ci"][0] <= exact["ratio_ci"][0] + 1e-12 and exact["ratio_ci"][1] <= c["ratio_ci"][1] + 1e-12
        assert c["difference_ci"][0] <= exact["difference_ci"][0] + 1e-12
        assert exact["difference_ci"][1] <= c["difference_ci"][1] + 1e-12
    # resuming: the chunks are kept, a rerun solves nothing and returns the same bounds
    again = audit_agents(world, agents, mace=mace, generator=None, work_dir=tmp_path / "c", chunk_size=8)
    assert len(list((tmp_path / "c").glob("chunk_*.npz"))) == 3
    assert np.array_equal(again.lower, out.lower)
    assert np.allclose(again.upper[has], truth[has], rtol=0.01)


def test_certified_cache_skips_mace(world_and_agents):
    world, S, agents = world_and_agents
    truth = np.array([_brute(world, S, x) for x in agents])
    geo = WorldGeometry.of(world)
    cache = {}
    for x, d in zip(agents, truth, strict=True):
        if not np.isfinite(d):
            cache[x.tobytes()] = (np.inf, np.inf, None, True)
            continue
        Xr = np.repeat(x[None], len(S), 0)
        ok = world.accepts(S) & ~geo.violations(Xr, S)
        best = S[int(np.argmin(np.where(ok, geo.distance(Xr, S), np.inf)))]
        cache[x.tobytes()] = (d, d, best, False)

    class NoMace:
        def solve(self, world, x):  # pragma: no cover - must not run
            raise AssertionError("MACE ran although every interval was already certified")

    out = audit_agents(world, agents, mace=NoMace(), cache=cache)
    assert (out.route == "labels").all() and out.mace_seconds.sum() == 0
    has = np.isfinite(truth)
    assert np.allclose(out.lower[has], truth[has]) and np.allclose(out.upper[has], truth[has])


def test_bootstrap_bounds_by_hand():
    a, b = np.array([2.0, 2.0, 2.0]), np.array([1.0, 1.0])
    exact = bootstrap_bounds(a, a, b, b, n_boot=50)
    assert exact["ratio"] == [2.0, 2.0] and exact["ratio_ci"] == [2.0, 2.0] and exact["difference"] == [1.0, 1.0]
    wide = bootstrap_bounds(a - 0.5, a, b, b + 1.0, n_boot=50)
    assert wide["ratio"] == pytest.approx([1.5 / 2.0, 2.0])
    assert wide["difference_ci"] == pytest.approx([1.5 - 2.0, 1.0])
    assert bootstrap_bounds(a, a, b[:0], b[:0])["ratio_ci"] is None


def test_audit_cli_fails_politely(tmp_path, capsys):
    """evaluate.py --audit on bad input: exit status 2 and one stderr line naming the problem (in-process)."""
    sys.path.insert(0, str(ROOT))
    import evaluate

    d = tmp_path / "seq"
    d.mkdir()
    (d / "config.yaml").write_text((ROOT / "configs" / "sequential_german.yaml").read_text())
    for args, needle in ((["--audit", str(tmp_path / "nowhere"), "--groups", "sex"], "not a run directory"),
                         (["--audit", str(tmp_path)], "--groups"),
                         ([], "name a run directory"),
                         (["--audit", str(d), "--groups", "sex"], "not a real-data tabular run")):
        assert evaluate.main(args) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and needle in lines[0], lines


# ------------------------------------------------------------------------------------ under the rules
RULES = {"a": {"max_increase": 1}, "links": [{"from": "b", "to": "a", "per_unit": 1}],
         "g": {"forbid": [["x", "z"], ["y", "z"]]}}


def test_audit_under_the_worlds_rules(world_and_agents, tmp_path):
    """MACE reads the world's rules: the bounds bracket the brute-force optimum under them, and a
    generator answer that breaks a rule is no upper bound."""
    from dataclasses import replace
    from types import SimpleNamespace

    from envs.rules import RuleSet
    from evaluation.audit import verified_distance

    world, S, agents = world_and_agents
    ruled = replace(world, rules=RuleSet.from_dict(RULES))
    rules, geo = ruled.compiled_rules(), WorldGeometry.of(world)
    truth = []
    for x in agents:
        X = np.repeat(x[None], len(S), 0)
        ok = world.accepts(S) & ~geo.violations(X, S) & rules.holds(x, S)
        truth.append(float(geo.distance(X[ok], S[ok]).min()) if ok.any() else np.inf)
    truth = np.array(truth)
    assert (truth > np.array([_brute(world, S, x) for x in agents]) + 1e-9).any()  # the rules change some optima
    class Unruled:  # answers with the optimum without the rules: some break them
        def recommend(self, w, X, norm="one"):
            CF = np.full(X.shape, np.nan)
            for i, x in enumerate(X):
                Xr = np.repeat(x[None], len(S), 0)
                ok = world.accepts(S) & ~geo.violations(Xr, S)
                if ok.any():
                    CF[i] = S[int(np.argmin(np.where(ok, geo.distance(Xr, S), np.inf)))]
            return SimpleNamespace(CF=CF, distance=None)

    gen = Unruled()
    rec = gen.recommend(ruled, agents)
    live = ~np.isnan(rec.CF).any(1)
    breaks = live & ~rules.holds(agents, np.nan_to_num(rec.CF))
    assert breaks.any() and np.isinf(verified_distance(ruled, agents[breaks], rec.CF[breaks])).all()
    assert np.isfinite(verified_distance(ruled, agents[live & ~breaks], rec.CF[live & ~breaks])).all()
    out = audit_agents(ruled, agents, mace=MACE(backend="milp", norm="one", time_limit=20), generator=gen,
                       work_dir=tmp_path / "c", chunk_size=12)
    has = np.isfinite(truth)
    assert (out.proven_none == ~has).all() and not out.unknown.any()
    assert (out.lower[has] <= truth[has] + 1e-9).all() and (out.upper[has] <= truth[has] * 1.01 + 1e-9).all()
    assert rules.holds(agents[has], out.cf[has]).all() and (out.upper_by == "generator").any()


def test_audit_of_a_run_states_its_rules(tmp_path):
    """A bundled German run trained now carries the default rules (world/rules.json); evaluate.py --audit
    runs under them (MACE through the run's world) and audit.json / audit.md state them."""
    import json

    import yaml

    from data_gen.default_rules import default_rules
    from evaluation.audit import audit_run
    from evaluation.tabular_experiment import load_tabular_config, load_tabular_run, train_tabular

    cfg = {"name": "g", "output_dir": str(tmp_path / "runs"),
           "tabular": {"dataset": "german", "model": "tree", "agents": 12, "geco_agents": 0,
                       "mace": {"time_limit": 10}, "compute": {"backend": "local", "n_workers": 1}},
           "generators": [{"method": "nearest_cfe"}]}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(cfg))
    run_dir = train_tabular(load_tabular_config(tmp_path / "g.yaml"), progress=False)
    assert json.loads((run_dir / "world" / "rules.json").read_text()) == default_rules("german").to_dict()
    world = load_tabular_run(run_dir).world
    names = list(world.compiled_rules().names)
    out = audit_run(run_dir, ["personal_status_sex"], sample=6, n_boot=50, plots=False, progress=False)
    assert out["rules"] == names and "duration: max_decrease 12" in names
    saved = json.loads((run_dir / "audit.json").read_text())
    assert saved["rules"] == names
    md = (run_dir / "audit.md").read_text()
    assert "Rules: every answer and bound is under the world's" in md and "`duration: max_decrease 12`" in md
    answered = np.isfinite(np.array(saved["per_agent"]["upper"], float))
    assert answered.any()
    # without rules (tabular.rules: none) the run has no rules.json, and the report says so
    cfg["tabular"]["rules"], cfg["name"] = "none", "g0"
    (tmp_path / "g0.yaml").write_text(yaml.safe_dump(cfg))
    plain = train_tabular(load_tabular_config(tmp_path / "g0.yaml"), progress=False)
    assert not (plain / "world" / "rules.json").exists()
    assert audit_run(plain, ["personal_status_sex"], sample=4, n_boot=50, plots=False, progress=False)["rules"] is None
    assert "the run's world has no rules" in (plain / "audit.md").read_text()
