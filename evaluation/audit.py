"""Recourse audits (issue 39): who bears the cost of recourse, with certified bounds.

    python evaluate.py --audit runs/NAME --groups sex race [--sample 500 --seed 0]

Over every rejected agent of a tabular run's test split (the classifier's held-out rows, or a
seeded sample of them), each agent's cost of recourse (MACE's normalized distance of Eq. 3) is
known as an interval ``[lower, upper]``:

- **upper**: the distance of a verified counterfactual: the learned generator's answer (checked
  here: accepted by the model, inside the agent's reachable box) or MACE's, whichever is nearer;
- **lower**: MACE's certificate ``delta_min`` (a lower bound on every counterfactual's distance);
  0 where MACE did not run or gave none.

Routes, cheapest first: the run's own MACE labels (an agent the run already labelled: its
certificate, no solve); the generator (microseconds; an upper bound only); MACE (seconds; both
bounds) only where the interval is still wider than ``tol`` relative to its upper end. MACE
runs in resumable chunks (data_gen.compute: local processes or Ray).

Per group of each attribute: the share with recourse (a verified answer), the share proven to have
none (MACE's infeasibility proof), the cost statistics as intervals (mean, median, quantiles: each
monotone in every agent's cost, so evaluated on the lower and on the upper ends they bracket the
true value), and the features changed most. Between a group and the attribute's reference group
(the largest): the ratio and difference of mean costs with bootstrap 95% intervals taken from the
bounds (``bootstrap_bounds``), so they hold whatever the uncertified agents' true optimum is.
The group attributes are immutable in the bundled worlds: no answer changes them, and the audit
checks every answer and counts any that does.

The audit runs under the world's rules (``envs.rules``; a run's ``world/rules.json``, Adult's and
German's default rules in a run trained with ``tabular.rules: default``): MACE reads them from the
world (its bounds are certified under them, in the distance weighted by their cost weights, which
the upper bounds use too), every generator answer must keep them to count as an upper bound, and
the report states them (``rules``: their names; null: the schema's mutability only).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from data_gen.compute import ChunkResult, ComputeConfig, chunk_bounds, run_chunks
from data_gen.mace_labels import raw_feature_index
from envs.tabular import TabularWorld
from learners.tabular import TabularGenerator, WorldGeometry

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
ROUTES = ("labels", "mace", "none")  # where an agent's lower bound came from


# ------------------------------------------------------------------------------------ per agent

@dataclass
class AuditAgents:
    """The per-agent result of an audit: bounds, answers, routes, times."""

    X: np.ndarray  # (N, D) encoded agents
    lower: np.ndarray  # (N,) certified lower bound on the cost of recourse (inf where proven none)
    upper: np.ndarray  # (N,) distance of a verified answer (inf where none is known)
    cf: np.ndarray  # (N, D) the answer achieving ``upper`` (NaN rows where none)
    proven_none: np.ndarray  # (N,) bool: MACE proved that no plausible counterfactual exists
    route: np.ndarray  # (N,) str: labels | mace | none (source of the lower bound)
    upper_by: np.ndarray  # (N,) str: generator | mace | labels | "" (source of the upper bound)
    gen_found: np.ndarray  # (N,) bool: the generator gave a verified answer
    mace_seconds: np.ndarray  # (N,) MACE's time per agent (0 where it did not run)
    gen_seconds: float = 0.0  # the generator's time over all agents (batched)
    wall_seconds: float = 0.0  # wall time of this call (resumed chunks excluded)
    notes: list[str] = field(default_factory=list)

    @property
    def has_recourse(self) -> np.ndarray:
        return np.isfinite(self.upper)

    @property
    def unknown(self) -> np.ndarray:
        return ~self.has_recourse & ~self.proven_none

    def rel_width(self) -> np.ndarray:
        """(upper - lower) / upper per agent with an answer (0 where upper = 0), NaN elsewhere."""
        w = np.full(len(self.upper), np.nan)
        ok = self.has_recourse
        w[ok] = np.where(self.upper[ok] > 0, (self.upper[ok] - self.lower[ok]) / np.maximum(self.upper[ok], 1e-300),
                         0.0)
        return w


def _mace_chunk(shared: tuple[Any, TabularWorld], X: np.ndarray) -> ChunkResult:
    """MACE on each row of a chunk: its answer, distance, certificate and time (module-level: pickled)."""
    solver, world = shared
    n, D = X.shape
    out = {"cf": np.full((n, D), np.nan), "distance": np.full(n, np.inf), "delta_min": np.zeros(n),
           "none": np.zeros(n, bool), "seconds": np.zeros(n)}
    for i, x in enumerate(X):
        t0 = time.perf_counter()
        r = solver.solve(world, x)[0]
        out["seconds"][i] = time.perf_counter() - t0
        if r.status == "ok":
            out["cf"][i] = np.asarray(r.extra["counterfactual"], float)
            out["distance"][i] = float(r.extra["distance"])
            out["delta_min"][i] = float(r.extra.get("delta_min", 0.0))
        elif r.status == "no_recourse":
            out["none"][i] = True
            out["delta_min"][i] = np.inf
    return out


def rules_distance(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, CF: np.ndarray) -> np.ndarray:
    """(N,) MACE's distance between paired rows with the world's cost weights (each feature's normalised
    change times the weight of the way it moved, ``solvers.mace.distance``): the distance MACE's
    certificate bounds; Eq. 3 unweighted where the rules give no weights."""
    rules = world.compiled_rules()
    if rules is None or not rules.weighted:
        return geo.distance(X, CF)
    from solvers.mace.distance import mix

    first = np.array([r.columns[0] for r in rules.raws], np.int64)
    directed = np.array([r.kind not in ("group", "nominal") for r in rules.raws])
    down = (CF[:, first] < X[:, first]) & directed
    return mix(geo.deltas(X, CF), geo.weights, np.where(down, rules.cost[:, 1], rules.cost[:, 0]))


def verified_distance(world: TabularWorld, X: np.ndarray, CF: np.ndarray, norm: str = "one") -> np.ndarray:
    """(N,) distance of each answer that the model accepts, that stays in the agent's reachable box
    (immutable features unchanged, monotone ones respected, one-hot groups whole) and that keeps the
    world's rules; inf elsewhere (the distance with the rules' cost weights: ``rules_distance``)."""
    geo = WorldGeometry.of(world, norm)
    d = np.full(len(X), np.inf)
    rows = np.flatnonzero(~np.isnan(CF).any(1))
    rules = world.compiled_rules()
    if len(rows) and rules is not None:  # the shared checker, whatever the generator promises
        rows = rows[rules.holds(X[rows], CF[rows])]
    if len(rows):
        ok = world.accepts(CF[rows]) & ~geo.violations(X[rows], CF[rows])
        rows = rows[ok]
        d[rows] = rules_distance(world, geo, X[rows], CF[rows])
    return d


def audit_agents(world: TabularWorld, X: np.ndarray, *, mace: Any, generator: TabularGenerator | None = None,
                 cache: dict[bytes, tuple[float, float, np.ndarray | None, bool]] | None = None,
                 norm: str = "one", tol: float = 0.01, work_dir: str | Path | None = None,
                 compute: ComputeConfig | None = None, chunk_size: int = 25,
                 progress: bool = False) -> AuditAgents:
    """Bound every agent's cost of recourse by the cheapest routes that reach ``tol``.

    ``mace``: a solvers.mace.MACE (its ``norm`` must be ``norm``); ``generator``: a trained tabular
    generator whose verified answers give upper bounds; ``cache``: row bytes -> (lower, upper,
    answer, proven none) already certified (a run's MACE labels); ``tol``: MACE runs where
    (upper - lower) > tol * upper after the cheaper routes; ``work_dir``: where MACE's chunks are
    kept (a rerun resumes; a temporary directory when None); ``compute``: where the chunks run.
    """
    t_start = time.perf_counter()
    X = world.schema.validate(X, name="X")
    n, D = X.shape
    lower, upper = np.zeros(n), np.full(n, np.inf)
    cf = np.full((n, D), np.nan)
    proven = np.zeros(n, bool)
    route = np.full(n, "none", dtype="<U8")
    upper_by = np.full(n, "", dtype="<U10")
    for i, x in enumerate(X):
        hit = (cache or {}).get(x.tobytes())
        if hit is None:
            continue
        lo, hi, ans, none = hit
        route[i] = "labels"
        if none:
            proven[i], lower[i] = True, np.inf
            continue
        lower[i] = lo
        if ans is not None and np.isfinite(verified_distance(world, x[None], ans[None], norm)[0]):
            upper[i], cf[i], upper_by[i] = hi, ans, "labels"
    gen_found = np.zeros(n, bool)
    gen_seconds = 0.0
    if generator is not None and n:
        # Compiling the generator's kernels is paid once per machine, not by the method: warm up first.
        tw = time.perf_counter()
        generator.recommend(world, X[: min(8, n)], norm=norm)
        if progress:
            print(f"warming up the generator (compiling kernels, not timed) ... {time.perf_counter() - tw:.1f} s",
                  file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        rec = generator.recommend(world, X, norm=norm)
        gd = verified_distance(world, X, rec.CF, norm)
        gen_seconds = time.perf_counter() - t0
        gen_found = np.isfinite(gd)
        better = gen_found & (gd < upper) & ~proven
        upper[better], cf[better], upper_by[better] = gd[better], rec.CF[better], "generator"
    with np.errstate(invalid="ignore"):  # inf - inf where nothing is known yet
        settled = np.isfinite(upper) & (upper - lower <= tol * upper + 1e-12)
    need = ~proven & ~settled
    todo = np.flatnonzero(need)
    mace_seconds = np.zeros(n)
    if len(todo):
        import tempfile

        tmp = None
        if work_dir is None:
            tmp = tempfile.TemporaryDirectory()
            work_dir = tmp.name
        bounds = chunk_bounds(len(todo), chunk_size)
        parts = run_chunks(_mace_chunk, (mace, world), [X[todo[s:e]] for s, e in bounds], work_dir,
                           compute=compute or ComputeConfig(), sizes=[e - s for s, e in bounds],
                           desc=f"audit MACE ({world.name})", progress=progress)
        if tmp is not None:
            tmp.cleanup()
        res = {k: np.concatenate([p[k] for p in parts]) for k in ("distance", "delta_min", "none", "seconds")}
        res_cf = np.concatenate([p["cf"] for p in parts]).reshape(len(todo), D)
        mace_seconds[todo] = res["seconds"]
        route[todo] = "mace"
        md = verified_distance(world, X[todo], res_cf, norm)
        for k, i in enumerate(todo):
            if res["none"][k]:
                # MACE's infeasibility proof; a verified answer from another route would contradict it
                if np.isfinite(upper[i]):
                    raise AssertionError(f"agent {i}: MACE proved no recourse, but a verified answer exists")
                proven[i], lower[i] = True, np.inf
                continue
            lower[i] = max(lower[i], res["delta_min"][k])
            if md[k] < upper[i]:
                upper[i], cf[i], upper_by[i] = md[k], res_cf[k], "mace"
    bad = np.isfinite(upper) & (lower > upper * (1 + 1e-9) + 1e-12)
    if bad.any():
        raise AssertionError(f"{int(bad.sum())} agents have a verified answer below their certified lower bound")
    lower = np.where(np.isfinite(upper), np.minimum(lower, upper), lower)
    return AuditAgents(X, lower, upper, cf, proven, route, upper_by, gen_found, mace_seconds, gen_seconds,
                       time.perf_counter() - t_start)


# -------------------------------------------------------------------------------------- statistics

def bootstrap_bounds(lo_a: np.ndarray, hi_a: np.ndarray, lo_b: np.ndarray, hi_b: np.ndarray, *,
                     n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Ratio mean(a)/mean(b) and difference mean(a) - mean(b) of costs known only as intervals.

    Point: the range over every cost inside the intervals. CI: percentile bootstrap over agents
    (resampled within each group, ``seed``); in each replicate the true statistic lies between the
    one taken at the favourable and the unfavourable ends of the intervals, so the CI is
    [q_low of the lowest, q_high of the highest]: it holds whatever the true optima are.
    """
    lo_a, hi_a, lo_b, hi_b = (np.asarray(v, float) for v in (lo_a, hi_a, lo_b, hi_b))
    if not (len(lo_a) and len(lo_b)):
        return {"n_a": int(len(lo_a)), "n_b": int(len(lo_b)), "ratio": None, "ratio_ci": None,
                "difference": None, "difference_ci": None}
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(lo_a), (n_boot, len(lo_a)))
    ib = rng.integers(0, len(lo_b), (n_boot, len(lo_b)))
    ma_lo, ma_hi, mb_lo, mb_hi = lo_a[ia].mean(1), hi_a[ia].mean(1), lo_b[ib].mean(1), hi_b[ib].mean(1)
    q = (1 - level) / 2

    def ratio(num: float | np.ndarray, den: float | np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(np.asarray(den) > 0, np.asarray(num) / np.maximum(den, 1e-300), np.inf)

    r_lo, r_hi = ratio(ma_lo, mb_hi), ratio(ma_hi, mb_lo)
    return {
        "n_a": int(len(lo_a)), "n_b": int(len(lo_b)),
        "ratio": [float(ratio(lo_a.mean(), hi_b.mean())), float(ratio(hi_a.mean(), lo_b.mean()))],
        "ratio_ci": [float(np.quantile(r_lo, q)), float(np.quantile(r_hi, 1 - q))],
        "difference": [float(lo_a.mean() - hi_b.mean()), float(hi_a.mean() - lo_b.mean())],
        "difference_ci": [float(np.quantile(ma_lo - mb_hi, q)), float(np.quantile(ma_hi - mb_lo, 1 - q))],
        "n_boot": int(n_boot), "level": level, "seed": int(seed),
    }


def _interval(fn: Any, lo: np.ndarray, hi: np.ndarray) -> list[float] | None:
    return [float(fn(lo)), float(fn(hi))] if len(lo) else None


def group_stats(agents: AuditAgents, mask: np.ndarray, feature_names: list[str], geo: WorldGeometry,
                top: int = 5) -> dict[str, Any]:
    """Shares, cost intervals and the features changed most, over the agents in ``mask``."""
    n = int(mask.sum())
    rec = mask & agents.has_recourse
    lo, hi = agents.lower[rec], agents.upper[rec]
    changed = geo.deltas(agents.X[rec], agents.cf[rec]) > 1e-12 if rec.any() else np.zeros((0, len(feature_names)))
    share = changed.mean(0) if len(changed) else np.zeros(len(feature_names))
    order = np.argsort(-share, kind="stable")[:top]
    w = agents.rel_width()[rec]
    return {
        "agents": n,
        "with_recourse": int(rec.sum()), "share_with_recourse": float(rec.sum() / n) if n else None,
        "proven_none": int((mask & agents.proven_none).sum()),
        "share_proven_none": float((mask & agents.proven_none).sum() / n) if n else None,
        "unknown": int((mask & agents.unknown).sum()),
        "cost_mean": _interval(np.mean, lo, hi), "cost_median": _interval(np.median, lo, hi),
        "cost_quantiles": {str(q): _interval(lambda v, q=q: np.quantile(v, q), lo, hi) for q in QUANTILES},
        "certified_share_1pct": float(np.mean(w <= 0.01 + 1e-12)) if len(w) else None,
        "features_changed_mean": float(changed.sum(1).mean()) if len(changed) else None,
        "features_changed_most": [{"feature": feature_names[j], "share": float(share[j])} for j in order
                                  if share[j] > 0],
        "feature_share": {feature_names[j]: float(share[j]) for j in range(len(feature_names))},
    }


def summarize(agents: AuditAgents, world: TabularWorld, groups: dict[str, np.ndarray],
              group_columns: dict[str, list[int]], *, norm: str = "one", n_boot: int = 2000, seed: int = 0,
              min_group: int = 10) -> dict[str, Any]:
    """Per-group statistics and between-group comparisons (each group against the largest) of an audit.

    ``groups``: attribute -> (N,) group label per agent; ``group_columns``: attribute -> its encoded
    columns (checked unchanged in every answer); ``min_group``: smaller groups are reported but not
    compared (their bootstrap says little).
    """
    geo = WorldGeometry.of(world, norm)
    names, _ = raw_feature_index(world.schema)
    w = agents.rel_width()
    has = agents.has_recourse
    out: dict[str, Any] = {
        "agents": int(len(agents.X)),
        "with_recourse": int(has.sum()), "proven_none": int(agents.proven_none.sum()),
        "unknown": int(agents.unknown.sum()),
        "certified_share_1pct": float(np.mean(w[has] <= 0.01 + 1e-12)) if has.any() else None,
        "rel_width_p99": float(np.quantile(w[has], 0.99)) if has.any() else None,
        "routes": {
            "lower_bound_from_run_labels": int((agents.route == "labels").sum()),
            "mace_solved": int((agents.route == "mace").sum()),
            "generator_verified_answers": int(agents.gen_found.sum()),
            "upper_bound_from": {k: int((agents.upper_by == k).sum()) for k in ("generator", "mace", "labels")},
            "mace_skipped_by_generator_and_labels": int((agents.route != "mace").sum()),
        },
        "seconds": {"wall_this_call": agents.wall_seconds, "generator_total": agents.gen_seconds,
                    "mace_total": float(agents.mace_seconds.sum()),
                    "mace_per_solved_agent": float(agents.mace_seconds[agents.route == "mace"].mean())
                    if (agents.route == "mace").any() else None},
        "overall": group_stats(agents, np.ones(len(agents.X), bool), names, geo),
        "attributes": {},
    }
    for attr, labels in groups.items():
        labels = np.asarray(labels).astype(str)
        cols = group_columns[attr]
        rows = np.flatnonzero(has)
        moved = int((np.abs(agents.cf[rows][:, cols] - agents.X[rows][:, cols]) > 1e-12).any(1).sum()) if len(rows) else 0
        mut = sorted({world.schema.features[c].mutability for c in cols})
        levels, counts = np.unique(labels, return_counts=True)
        per = {str(g): group_stats(agents, labels == g, names, geo) for g in levels}
        ref = str(levels[np.argmax([per[str(g)]["with_recourse"] for g in levels])])
        comp = {}
        for g in levels:
            g = str(g)
            if g == ref or per[g]["with_recourse"] < min_group:
                continue
            a, b = has & (labels == g), has & (labels == ref)
            c = bootstrap_bounds(agents.lower[a], agents.upper[a], agents.lower[b], agents.upper[b],
                                 n_boot=n_boot, seed=seed)
            lo, hi = c["ratio_ci"]
            c["conclusion"] = (f"{g} pays more than {ref}" if lo > 1 else f"{g} pays less than {ref}" if hi < 1
                               else "undecided at 95%")
            comp[g] = c
        out["attributes"][attr] = {"mutability": mut, "answers_changing_it": moved, "reference": ref,
                                   "groups": per, "compared_to_reference": comp,
                                   "too_small_to_compare": [str(g) for g in levels
                                                            if per[str(g)]["with_recourse"] < min_group]}
    return out


# ---------------------------------------------------------------------------------------- a run

def _group_columns(world: TabularWorld, attr: str) -> tuple[str, list[int]]:
    """The raw feature an attribute names (case-insensitive; 'sex' also finds isMale) and its columns."""
    raws = [f.name for f in world.encoder.raw_columns]
    aliases = {"sex": ("sex", "ismale"), "race": ("race",), "age": ("age", "agegroup")}
    for want in aliases.get(attr.lower(), (attr.lower(),)):
        for r in raws:
            if r.lower() == want:
                return r, world.encoder.columns_of(r)
    raise ValueError(f"--groups: the run's world has no feature {attr!r} (its features: {', '.join(raws)})")


def _group_labels(world: TabularWorld, name: str, values: np.ndarray) -> np.ndarray:
    """Decoded values of a raw feature as readable group names (a coded binary's labels: 1 -> African-American)."""
    f = next(f for f in world.encoder.raw_columns if f.name == name)
    if f.kind != "categorical" and f.labels and len(f.labels) == len(f.levels):
        names = {str(lv): str(lb) for lv, lb in zip(f.levels, f.labels, strict=True)}
        return np.array([names.get(str(v), str(v)) for v in values])
    return np.asarray(values).astype(str)


def _labels_cache(run: Any, tol: float) -> dict[bytes, tuple[float, float, np.ndarray | None, bool]]:
    """The run's MACE labels as certificates: rows already certified within ``tol``, or proven without recourse."""
    labels = run.labels()
    out = {}
    for i in range(len(labels)):
        s = labels.status[i]
        if s == "no_recourse":
            out[labels.X[i].tobytes()] = (np.inf, np.inf, None, True)
        elif s == "ok":
            d, lo = float(labels.distance[i]), float(labels.delta_min[i])
            if d - lo <= tol * d + 1e-12:
                out[labels.X[i].tobytes()] = (lo, d, labels.cf[i], False)
    return out


def audit_run(run_dir: str | Path, groups: list[str], *, sample: int | None = None, seed: int = 0,
              tol: float = 0.01, time_limit: float | None = None, mace_rel_tol: float | None = None,
              n_workers: int | None = None,
              chunk_size: int = 25, generator: str | None = None, n_boot: int = 2000, plots: bool = True,
              progress: bool = True) -> dict[str, Any]:
    """Audit a tabular run: audit.json, audit.md and plots in the run directory; returns the summary.

    ``groups``: attributes to compare (raw feature names, e.g. sex race); ``sample``: audit a seeded
    sample of that many rejected test agents (None: all); ``seed``: of the sample and the bootstrap;
    ``tol``: relative interval width below which MACE is skipped; ``time_limit``: MACE's seconds per
    agent (None: the run's); ``mace_rel_tol``: MACE's certificate tolerance (None: the run's; the
    audit's ``tol`` is enough for intervals of that width, and a looser one lets HiGHS stop sooner); ``n_workers``: processes for MACE's chunks (None: the run's compute
    block); ``chunk_size``: agents per resumable chunk; ``generator``: which of the run's generators
    gives upper bounds (None: the served one, "none": no generator); ``n_boot``: bootstrap replicates.
    """
    from evaluation.tabular_experiment import load_tabular_run
    from solvers.mace import MACE

    t0 = time.perf_counter()
    if not groups:
        raise ValueError("--groups: name at least one attribute (e.g. --groups sex race)")
    run = load_tabular_run(run_dir)
    if run.black_box:  # MACE cannot read a black box: no certified bound to report
        from evaluation.blackbox_runs import AUDIT_REFUSAL

        raise ValueError(AUDIT_REFUSAL)
    world, t = run.world, run.config.tabular
    cols = {a: _group_columns(world, a) for a in groups}
    data = run.data()  # the bundled data set's split, or the one a run on the user's table stored
    X_all = data.X_test[~world.accepts(data.X_test)]
    n_rejected = len(X_all)
    if sample is not None and sample < 1:
        raise ValueError(f"--sample: must be >= 1, got {sample}")
    X = X_all
    if sample is not None and sample < n_rejected:
        X = X_all[np.sort(np.random.default_rng(seed).permutation(n_rejected)[:sample])]
    raw = world.encoder.decode(X)
    labels = {a: _group_labels(world, name, raw[name].to_numpy()) for a, (name, _) in cols.items()}
    gen = None
    gen_name = generator or next(iter(run.generators))
    if gen_name != "none":
        if gen_name not in run.generators:
            raise ValueError(f"--generator: the run has no generator {gen_name!r} (has {list(run.generators)})")
        gen = run.generators[gen_name]
    params = dict(run.mace_params)
    if time_limit is not None:
        params["time_limit"] = float(time_limit)
    if mace_rel_tol is not None:
        params["rel_tol"] = float(mace_rel_tol)
    mace = MACE(**params)
    compute = t.compute if n_workers is None else t.compute.model_copy(update={"n_workers": int(n_workers)})
    key = hashlib.sha256(X.tobytes() + json.dumps([params, gen_name, tol], sort_keys=True).encode()).hexdigest()[:12]
    work_dir = Path(run.run_dir) / "audit" / f"chunks_{key}"
    agents = audit_agents(world, X, mace=mace, generator=gen, cache=_labels_cache(run, tol), norm=t.mace.norm,
                          tol=tol, work_dir=work_dir, compute=compute, chunk_size=chunk_size, progress=progress)
    out = summarize(agents, world, labels, {a: c for a, (_, c) in cols.items()}, norm=t.mace.norm,
                    n_boot=n_boot, seed=seed)
    out.update({
        "run": str(run.run_dir), "world": world.name, "dataset": t.dataset or t.table, "model": t.model_file or t.model,
        "rules": None if world.compiled_rules() is None else list(world.compiled_rules().names),
        "population": {"rejected_test_agents": int(n_rejected), "audited": int(len(X)),
                       "sample": None if len(X) == n_rejected else {"size": int(len(X)), "seed": int(seed)}},
        "group_features": {a: name for a, (name, _) in cols.items()},
        "mace": {**params, "oracle": None}, "generator": gen_name, "tol": tol,
        "compute": compute.model_dump(), "chunks": str(work_dir),
    })
    out["seconds"]["total_this_call"] = time.perf_counter() - t0
    from evaluation.audit_report import audit_markdown, audit_plots, clean

    per_agent = {"lower": agents.lower.tolist(), "upper": agents.upper.tolist(), "route": agents.route.tolist(),
                 "upper_by": agents.upper_by.tolist(), **{a: v.tolist() for a, v in labels.items()}}
    (run.run_dir / "audit.json").write_text(json.dumps(clean({**out, "per_agent": per_agent}), indent=1))

    figs = audit_plots(agents, labels, out, run.run_dir) if plots else []
    (run.run_dir / "audit.md").write_text(audit_markdown(out, figs))
    return out
