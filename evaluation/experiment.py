"""Train and evaluate the models an experiment config names (the logic behind the scripts).

A run directory ``<output_dir>/<name>/`` holds ``config.yaml``, ``dataset.json`` (where the
dataset is and its content hash), ``models/<model>/<filter>/seed<k>/`` (weights + config +
training metrics) and, after evaluation, ``metrics.json``, ``report.md`` and ``plots/``.
Training is resumable: a model whose directory is complete, and was trained on the same dataset
with the same method, parameters and split (its ``training_key``), is not trained again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from data_gen.dataset import Dataset, build_dataset, load_dataset
from evaluation.config import ExperimentConfig, MethodConfig, parse_config
from learners.base import FitContext, Generator
from learners.grouped import group_aware


def _slug(rule: str) -> str:
    return rule.replace(">", "gt")


def model_dir(run_dir: Path, spec: MethodConfig, rule: str, seed: int) -> Path:
    return run_dir / "models" / spec.label / _slug(rule) / f"seed{seed}"


def train_model(cfg: ExperimentConfig, ds: Dataset, spec: MethodConfig, train: Any, rule: str, seed: int,
                out: Path, info: dict[str, Any] | None = None, progress: bool = True) -> float:
    """Fit one generator on ``train``, save it to ``out`` with ``train_info.json``; returns fit seconds."""
    model = group_aware(spec.method, spec.params, spec.group_mode)
    ctx = FitContext.from_world(ds.world, cfg.dataset.max_cfe_len, seed=seed, run_dir=out / "training",
                                progress=progress)
    t1 = time.perf_counter()
    model.fit(train, None, ctx)
    seconds = time.perf_counter() - t1
    model.save(out)
    (out / "train_info.json").write_text(json.dumps(
        {"train_seconds": seconds, "train_agents": len(train), "filter": rule, "seed": seed, **(info or {})}))
    return seconds


def training_key(cfg: ExperimentConfig, ds: Dataset, spec: MethodConfig, rule: str, seed: int) -> str:
    """What a trained model depends on (dataset content, method and params, augmentation, split), hashed:
    a model directory is reused only when its key matches."""
    what = {"dataset": ds.manifest["content_hash"], "model": spec.model_dump(mode="json"),
            "augmentation": cfg.augmentation.model_dump(mode="json"),
            "test_fraction": cfg.evaluation.test_fraction, "filter": rule, "seed": seed}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _trained_key(out: Path) -> str | None:
    info = out / "train_info.json"
    return json.loads(info.read_text()).get("key") if info.exists() else None


def train_experiment(cfg: ExperimentConfig, progress: bool = True, log=print) -> Path:
    """Build or reuse the dataset, then train every generator on every filter and seed."""
    for spec in cfg.generators + cfg.policies:  # a method's typo answers now, not after the dataset is built
        group_aware(spec.method, spec.params, spec.group_mode)  # __init__ only stores (and checks) its parameters
    t0 = time.perf_counter()
    ds = build_dataset(cfg.dataset, cfg.data_dir, cfg.dataset_name, progress=progress)
    log(f"dataset {ds.path} ({len(ds)} agents, built/reused in {time.perf_counter() - t0:.1f}s)")
    run_dir = Path(cfg.output_dir) / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(json.loads(cfg.model_dump_json()), sort_keys=False))
    (run_dir / "dataset.json").write_text(json.dumps({
        "path": str(ds.path.resolve()), "content_hash": ds.manifest["content_hash"],
        "world_fingerprint": ds.manifest["world_fingerprint"], "statistics": ds.manifest["statistics"]}, indent=2))
    aug = cfg.augmentation
    for rule in cfg.evaluation.filters:
        train, _ = ds.split(rule, cfg.evaluation.test_fraction)
        aug_stats: dict[str, Any] = {}
        if aug.ag1_per_agent or aug.ag2_min_count:
            from data_gen.augmentation import augment

            train, aug_stats = augment(ds.world, train, per_agent=aug.ag1_per_agent, min_count=aug.ag2_min_count,
                                       draws=aug.draws, rounds=aug.rounds, seed=cfg.dataset.seed)
            log(f"  augmentation [{rule}]: {aug_stats}")
        for seed in cfg.seeds:
            for spec in cfg.generators + cfg.policies:  # a policy is a generator (greedy rollout)
                out = model_dir(run_dir, spec, rule, seed)
                key = training_key(cfg, ds, spec, rule, seed)
                if (out / "config.json").exists():
                    if _trained_key(out) == key:
                        log(f"  {spec.label} [{rule}, seed {seed}]: already trained, skipped")
                        continue
                    log(f"  {spec.label} [{rule}, seed {seed}]: the config or dataset changed, retraining")
                    shutil.rmtree(out)
                seconds = train_model(cfg, ds, spec, train, rule, seed, out,
                                      {"augmentation": aug_stats, "key": key}, progress)
                log(f"  {spec.label} [{rule}, seed {seed}]: trained on {len(train)} agents "
                    f"in {seconds:.1f}s")
    return run_dir


def load_run(run_dir: str | Path) -> tuple[ExperimentConfig, Dataset]:
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise FileNotFoundError(f"run: {run_dir} has no config.yaml (not a run directory)")
    cfg = parse_config(yaml.safe_load((run_dir / "config.yaml").read_text()), str(run_dir / "config.yaml"))
    info = json.loads((run_dir / "dataset.json").read_text())
    ds = load_dataset(info["path"])
    if ds.manifest["content_hash"] != info["content_hash"]:
        raise ValueError(f"run: dataset {info['path']} changed since training (content hash differs)")
    return cfg, ds


def fastest(fn: Any, repeats: int) -> tuple[float, Any]:
    """Seconds of the fastest of ``repeats`` calls of ``fn()`` and the last result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def time_exact_solvers(ds: Dataset, X: np.ndarray, groups: np.ndarray | None, n_agents: int,
                       repeats: int = 1) -> dict[str, Any]:
    """Per-agent time of the exact solvers, the amortization baseline (nothing when ``n_agents`` is 0).

    The compiled branch and bound labels every agent of ``X`` in one batch, as the generators are
    timed (a fixed per-call cost would otherwise inflate a small batch's per-agent time), fastest
    of ``repeats`` passes; the CVXPY ILP, ~10^4 times slower, solves the first ``min(n_agents, 50)``.
    """
    from solvers.setcover_fast import FastSetCover
    from solvers.setcover_ilp import CvxpySetCover

    out: dict[str, Any] = {}
    if n_agents == 0 or len(X) == 0:
        return out
    g = None if ds.world.n_groups == 1 else groups
    fast = FastSetCover(dedupe=False)
    fast.label_batch(ds.world, X[:2], None if g is None else g[:2])  # compile outside the timing
    out["exact_bnb_s_per_agent"] = fastest(lambda: fast.label_batch(ds.world, X, g), repeats)[0] / len(X)
    k = min(n_agents, len(X), 50)
    t = time.perf_counter()
    CvxpySetCover(check_unique=False).label_batch(ds.world, X[:k], None if g is None else g[:k])
    out["cvxpy_ilp_s_per_agent"] = (time.perf_counter() - t) / k
    out["timed_agents"] = {"exact_bnb": int(len(X)), "cvxpy_ilp": int(k)}
    return out


def predict_agents(model: Generator, X: np.ndarray, groups: np.ndarray | None) -> Any:
    """``model.predict``, with each agent's group where the model takes it (group-aware generators,
    and policies, which act in the world)."""
    if groups is not None and (getattr(model, "uses_groups", False) or hasattr(model, "predict_sequences")):
        return model.predict(X, groups)
    return model.predict(X)


def filter_summary(ds: Dataset, rule: str, train: Any, test: Any, unseen: np.ndarray) -> dict[str, Any]:
    """What bounds every model on one filter's test split: the share of test agents whose ``x``
    is not in training (``unseen``) and, in a grouped world, the group-blind ceilings (evaluation.metrics)."""
    from evaluation.metrics import bayes_group_blind_ceiling, empirical_group_blind_ceiling

    out: dict[str, Any] = {"test_agents": int(len(test)), "train_agents": int(len(train)),
                           "unseen_agents": int(unseen.sum()), "unseen_share": float(unseen.mean()) if len(test) else 0.0}
    if ds.world.n_groups > 1 and len(test):
        from data_gen.splits import filter_mask

        allowed = None if rule == "all" else ds.sets[filter_mask(ds.class_ids, rule)]
        out["group_blind_ceiling"] = {
            "bayes": bayes_group_blind_ceiling(ds.world, test.X, test.groups, test.sets, ds.config.max_cfe_len,
                                               ds.config.require_unique, allowed),
            "empirical": empirical_group_blind_ceiling(test.X, test.sets, test.groups)}
    return out


def evaluate_run(run_dir: str | Path, plots: bool = True, log=print, filters: list[str] | None = None
                 ) -> dict[str, Any]:
    """Evaluate every trained model on its held-out split; writes metrics.json, report.md, plots.

    ``filters`` restricts the evaluation to some of the run's filters (default: all of them).
    Accuracy is reported overall and on the test agents whose ``x`` is not in the filter's
    training split (``accuracy_unseen``; augmented agents are not counted as training ``x``).
    """
    from evaluation.metrics import exact_match, generator_metrics, unseen_mask
    from evaluation.report import write_report

    run_dir = Path(run_dir)
    cfg, ds = load_run(run_dir)
    results: dict[str, Any] = {"run": cfg.name, "dataset": ds.manifest["statistics"], "filters": {}, "models": {}}
    arrays: dict[str, Any] = {}
    unknown = sorted(set(filters or []) - set(cfg.evaluation.filters))
    if unknown:
        raise ValueError(f"filters: {unknown} are not filters of this run ({cfg.evaluation.filters})")
    for rule in filters or cfg.evaluation.filters:
        train, test = ds.split(rule, cfg.evaluation.test_fraction)
        unseen = unseen_mask(train.X, test.X)
        results["filters"][rule] = filter_summary(ds, rule, train, test, unseen)
        groups = test.groups if ds.world.n_groups > 1 else None
        if "timing" not in results:
            results["timing"] = time_exact_solvers(ds, test.X, groups, cfg.evaluation.solver_timing_agents,
                                                   cfg.evaluation.timing_repeats)
        for spec in cfg.generators + cfg.policies:
            per_seed = []
            for seed in cfg.seeds:
                path = model_dir(run_dir, spec, rule, seed)
                if not (path / "config.json").exists():
                    raise FileNotFoundError(f"model: {path} is missing; run train.py on this config first")
                model = Generator.load(path)
                predict_agents(model, test.X[:8], None if groups is None else groups[:8])  # warm-up, not timed
                seconds, pred = fastest(lambda: predict_agents(model, test.X, groups),  # noqa: B023
                                        cfg.evaluation.timing_repeats)
                per_agent = seconds / max(len(test), 1)
                m = generator_metrics(ds.world, test.X, test.groups, test.sets, test.cost, pred.sets, pred.confidence,
                                      unseen)
                arrays[f"{spec.label} [{rule}] seed{seed}"] = m.pop("_arrays")
                m["inference_s_per_agent"] = per_agent
                base = results["timing"].get("exact_bnb_s_per_agent")
                if base:
                    m["speedup_vs_exact_bnb"] = base / max(per_agent, 1e-12)
                ilp = results["timing"].get("cvxpy_ilp_s_per_agent")
                if ilp:
                    m["speedup_vs_cvxpy_ilp"] = ilp / max(per_agent, 1e-12)
                k = cfg.evaluation.verified_top_k
                if k and hasattr(model, "classes_") and hasattr(model, "predict_proba"):
                    from evaluation.verified import (
                        verified_top_k,  # the k likeliest CFEs, checked in the world
                    )

                    t = time.perf_counter()
                    vp = verified_top_k(model, ds.world, test.X, groups, k=k)
                    m["verified_top_k"] = {
                        "k": k, "s_per_agent": (time.perf_counter() - t) / max(len(test), 1),
                        "accuracy": float(exact_match(vp.sets, test.sets).mean())}
                info = path / "train_info.json"
                if info.exists():
                    m["train_seconds"] = json.loads(info.read_text())["train_seconds"]
                if hasattr(model, "predict_sequences"):  # an RL policy: optimality against the exact optimum
                    from evaluation.policy_eval import policy_metrics

                    pm = policy_metrics(model, ds.world, test.X, test.groups,
                                        exact_agents=cfg.evaluation.solver_timing_agents or None, repeats=1)
                    m["policy"] = {k: v for k, v in pm.items() if k != "set_cover_vs_ucs"}
                    if "set_cover_vs_ucs" in pm:
                        m["policy"]["set_cover_vs_ucs"] = pm["set_cover_vs_ucs"]
                m["seed"] = seed
                per_seed.append(m)
            accs = np.array([m["accuracy"]["value"] for m in per_seed])
            unseen_accs = np.array([m["accuracy_unseen"]["value"] for m in per_seed])
            results["models"][f"{spec.label} [{rule}]"] = {
                "method": spec.method, "group_mode": spec.group_mode, "filter": rule, "test_agents": len(test),
                "unseen_test_agents": int(unseen.sum()), "accuracy_unseen_mean": float(unseen_accs.mean()),
                "accuracy_mean": float(accs.mean()), "accuracy_std_over_seeds": float(accs.std()),
                "seeds": per_seed}
    (run_dir / "metrics.json").write_text(json.dumps(results, indent=2, default=float))
    table = write_report(run_dir, results, arrays if plots else None)
    log(table)
    return results
