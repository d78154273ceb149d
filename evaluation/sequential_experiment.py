"""Sequential-world experiments: label rejected agents with the sequencer, train the sequential
policies, evaluate them against the sequencer and the exact reference (the logic behind
``train.py configs/sequential_adult.yaml`` and ``evaluate.py runs/sequential_adult``).

A run directory ``<output_dir>/<name>/`` holds ``config.yaml``, ``labels.json`` (where the
sequencer's labels are, their content hash), ``models/<model>/seed<k>/`` (weights + config) and,
after evaluation, ``metrics.json`` and ``report.md``. The agents are the labelled rejected agents
in ``rejected_agents(split="all")`` order (the data set's test split first); the first
``test_agents`` are held out and never trained on.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import Field, model_validator

from data_gen.config import StrictModel, parse_model, read_yaml
from data_gen.sequence_labels import SequenceLabelSet, build_sequence_dataset
from envs.sequential import SequentialWorld
from evaluation.config import MethodConfig
from learners.base import Generator, build_generator
from learners.policies.sequential import sequential_context
from learners.policies.sequential_rollout import SequencePrediction


class SequentialExperimentConfig(StrictModel):
    """A sequential experiment: the world, the labelled agents, the policies and the evaluation."""

    name: str = Field(description="run-directory name")
    world: Literal["adult", "german"] = Field(description="sequential CSCF world")
    discounts: bool = Field(True, description="Adult: CSCF's discount graph (False: scf, c = b)")
    agents: int = Field(600, ge=2, description="rejected agents labelled by the sequencer (test split first)")
    test_agents: int = Field(100, ge=1, description="the first this many labelled agents are held out for evaluation")
    sequencer_generations: int = Field(30, ge=1, description="BRKGA generations of the labels (CSCF: 150)")
    exact_max_length: int = Field(3, ge=1, description="longest sequence of the exact grid reference")
    output_dir: str = Field("runs", description="where run directories are written")
    labels_root: str = Field("data_cache/sequence_labels", description="where the labels are cached")
    policies: list[MethodConfig] = Field(default_factory=list, description="sequential policies to train")
    seeds: list[int] = Field([0], min_length=1, description="training seeds")
    beam_widths: list[int] = Field(default_factory=list,
                                   description="evaluation: also answer with a verified beam search of these widths")
    beam_policies: list[str] = Field(default_factory=list,
                                     description="evaluation: the policies (model names) evaluated with beam_widths")
    n_jobs: int = Field(2, ge=1, description="processes labelling agents")

    @model_validator(mode="after")
    def _check(self) -> SequentialExperimentConfig:
        if self.test_agents >= self.agents:
            raise ValueError(f"test_agents: must be < agents ({self.agents}), got {self.test_agents}")
        labels = [p.label for p in self.policies]
        if len(set(labels)) < len(labels):
            raise ValueError(f"policies: model names must differ (give each a 'name'), got {labels}")
        unknown = sorted(set(self.beam_policies) - set(labels))
        if unknown:
            raise ValueError(f"beam_policies: {unknown} are not among the policies {labels}")
        if any(w < 2 for w in self.beam_widths):
            raise ValueError(f"beam_widths: widths must be >= 2 (1 is the raw rollout), got {self.beam_widths}")
        return self


def is_sequential_config(data: Any) -> bool:
    """Whether a parsed YAML is a sequential experiment (it names a ``world``)."""
    return isinstance(data, dict) and "world" in data


def load_sequential_config(path: str | Path) -> SequentialExperimentConfig:
    return parse_model(SequentialExperimentConfig, read_yaml(path), str(path))


def labels_of(cfg: SequentialExperimentConfig, progress: bool = True) -> tuple[SequenceLabelSet, Path, SequentialWorld]:
    """The sequencer's labels of the config's agents (built once, cached) and their world."""
    labels, path = build_sequence_dataset(cfg.world, n_agents=cfg.agents, split="all", seed=0,
                                          discounts=cfg.discounts,
                                          solver_params={"n_generations": cfg.sequencer_generations},
                                          root=cfg.labels_root, n_jobs=cfg.n_jobs, progress=progress)
    return labels, path, SequentialWorld.load(path / "world.json")


class _Rows:
    """A row subset of a label set, with the attributes the policies read."""

    def __init__(self, labels: SequenceLabelSet, rows: np.ndarray):
        self.X, self.actions, self.values = labels.X[rows], labels.actions[rows], labels.values[rows]
        self.cost, self.ok = labels.cost[rows], labels.ok[rows]

    def __len__(self) -> int:
        return len(self.X)


def train_sequential(cfg: SequentialExperimentConfig, progress: bool = True, log=print) -> Path:
    """Label (or reuse the labels), then train every policy on every seed; resumable."""
    t0 = time.perf_counter()
    labels, path, world = labels_of(cfg, progress)
    log(f"labels {path} ({len(labels)} agents, {time.perf_counter() - t0:.1f}s)")
    run_dir = Path(cfg.output_dir) / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(json.loads(cfg.model_dump_json()), sort_keys=False))
    manifest = json.loads((path / "manifest.json").read_text())
    (run_dir / "labels.json").write_text(json.dumps({"path": str(path.resolve()),
                                                     "content_hash": manifest["content_hash"]}, indent=2))
    train = _Rows(labels, np.arange(cfg.test_agents, len(labels)))
    for seed in cfg.seeds:
        for spec in cfg.policies:
            out = run_dir / "models" / spec.label / f"seed{seed}"
            if (out / "config.json").exists():
                log(f"  {spec.label} [seed {seed}]: already trained, skipped")
                continue
            t1 = time.perf_counter()
            ctx = sequential_context(world, seed, run_dir=run_dir, progress=progress)
            model = build_generator(spec.method, spec.params).fit(train, None, ctx)
            model.save(out)
            seconds = time.perf_counter() - t1
            (out / "train_info.json").write_text(json.dumps({"train_seconds": seconds, "train_agents": len(train)}))
            log(f"  {spec.label} [seed {seed}]: trained in {seconds:.1f}s")
    return run_dir


# ---------------------------------------------------------------------------- evaluation
def exact_reference(world: SequentialWorld, X: np.ndarray, max_length: int = 3) -> dict[str, np.ndarray]:
    """The exact grid reference (cheapest valid sequence of <= ``max_length`` steps) per agent."""
    from solvers.sequential import ExactSequenceSearch

    solver = ExactSequenceSearch(max_length=max_length)
    cost, seconds = np.full(len(X), np.inf), np.zeros(len(X))
    for i, x in enumerate(X):
        t = time.perf_counter()
        r = solver.solve(world, x)[0]
        seconds[i] = time.perf_counter() - t
        if r.found:
            cost[i] = r.cost
    return {"cost": cost, "seconds": seconds}


def order_stats(world: SequentialWorld, X: np.ndarray, pred: SequencePrediction) -> dict[str, Any]:
    """For valid answers of >= 2 steps: how often the policy's order is cheaper than the same
    (action, value) steps in another valid order, and how often it is the cheapest order."""
    cheaper = cheapest = n = 0
    for i in np.flatnonzero(pred.accepted & ((pred.sets >= 0).sum(1) >= 2)):
        L = int((pred.sets[i] >= 0).sum())
        perms = np.array(list(itertools.permutations(range(L))))
        A, V = pred.sets[i, perms], pred.values[i, perms]
        r = world.rollout(np.repeat(X[i:i + 1], len(perms), 0), A, V)
        ok = r.ok & world.accepts(r.final)
        others = r.cost[1:][ok[1:]]
        if len(others) == 0:
            continue
        n += 1
        cheaper += bool((pred.cost[i] < others - 1e-12).any())
        cheapest += bool(pred.cost[i] <= others.min() + 1e-12)
    return {"multi_step_answers": n, "share_cheaper_than_another_order": cheaper / n if n else None,
            "share_cheapest_order": cheapest / n if n else None}


def policy_metrics(world: SequentialWorld, X: np.ndarray, pred: SequencePrediction, seq_cost: np.ndarray,
                   exact_cost: np.ndarray, seconds: float) -> dict[str, Any]:
    """Validity, cost against the sequencer and the exact reference, length, order, speed."""
    v = pred.accepted
    both = v & np.isfinite(seq_cost)
    ex = v & np.isfinite(exact_cost)
    ratio = pred.cost[both] / np.maximum(seq_cost[both], 1e-12)
    return {
        "agents": int(len(X)), "validity": float(v.mean()),
        "mean_cost": float(pred.cost[v].mean()) if v.any() else None,
        "mean_cost_ratio_to_sequencer": float(pred.cost[both].sum() / seq_cost[both].sum()) if both.any() else None,
        "mean_per_agent_ratio": float(ratio.mean()) if both.any() else None,
        "median_per_agent_ratio": float(np.median(ratio)) if both.any() else None,
        "share_cheaper_than_sequencer": float((pred.cost[both] < seq_cost[both] - 1e-9).mean()) if both.any() else None,
        "share_within_1pct_of_sequencer": float((ratio <= 1.01).mean()) if both.any() else None,
        "mean_regret_to_exact": float((pred.cost[ex] - exact_cost[ex]).mean()) if ex.any() else None,
        "share_exact_optimal": float((pred.cost[ex] <= exact_cost[ex] + 1e-9).mean()) if ex.any() else None,
        "mean_length": float((pred.sets[v] >= 0).sum(1).mean()) if v.any() else None,
        **order_stats(world, X, pred),
        "ms_per_agent": 1000 * seconds / len(X),
        "_ratios": ratio.tolist(),
        "_costs": np.where(v, pred.cost, np.inf).tolist(),
        "_steps": [[[world.action_names[a], None if np.isnan(x) else float(x)] for a, x in zip(s, vals, strict=True)
                    if a >= 0] for s, vals in zip(pred.sets, pred.values, strict=True)],
    }


def run_labels(run_dir: str | Path) -> dict[str, Any]:
    """The run's ``labels.json`` (where its labelled agents and world are), or a clear error."""
    path = Path(run_dir) / "labels.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (an unfinished sequential run: run train.py on its config first)")
    return json.loads(path.read_text())


def evaluate_sequential(run_dir: str | Path, log=print, repeats: int = 3) -> dict[str, Any]:
    """Evaluate every trained policy of a run on its held-out agents; writes metrics.json and report.md."""
    run_dir = Path(run_dir)
    cfg = parse_model(SequentialExperimentConfig, yaml.safe_load((run_dir / "config.yaml").read_text()),
                      str(run_dir / "config.yaml"))
    info = run_labels(run_dir)
    labels = SequenceLabelSet.load(info["path"])
    world = SequentialWorld.load(Path(info["path"]) / "world.json")
    test = np.arange(cfg.test_agents)
    X, seq_cost = labels.X[test], labels.cost[test]
    t0 = time.perf_counter()
    exact = exact_reference(world, X, cfg.exact_max_length)
    log(f"exact reference on {len(X)} agents: {time.perf_counter() - t0:.1f}s")
    ex_ok = np.isfinite(exact["cost"]) & np.isfinite(seq_cost)
    seq = {"agents": int(len(X)), "validity": float(np.isfinite(seq_cost).mean()),
           "mean_cost": float(seq_cost[np.isfinite(seq_cost)].mean()),
           "mean_regret_to_exact": float((seq_cost[ex_ok] - exact["cost"][ex_ok]).mean()) if ex_ok.any() else None,
           "share_exact_optimal": float((seq_cost[ex_ok] <= exact["cost"][ex_ok] + 1e-9).mean()) if ex_ok.any() else None,
           # where a cheaper answer than the sequencer's exists on the grid: the most any policy can beat it on
           "share_beatable": float((exact["cost"][ex_ok] < seq_cost[ex_ok] - 1e-9).mean()) if ex_ok.any() else None,
           "mean_length": float(labels.length[test][np.isfinite(seq_cost)].mean()),
           "s_per_agent": float(labels.runtime[test].mean()), "generations": cfg.sequencer_generations,
           "_costs": seq_cost.tolist()}
    results: dict[str, Any] = {
        "run": cfg.name, "world": world.name, "labels": info["path"], "train_agents": int(len(labels) - len(test)),
        "test_agents": int(len(test)), "sequencer": seq,
        "exact": {"found": float(np.isfinite(exact["cost"]).mean()), "s_per_agent": float(exact["seconds"].mean()),
                  "max_length": cfg.exact_max_length,
                  "mean_cost": float(exact["cost"][np.isfinite(exact["cost"])].mean())},
        "models": {}}
    for spec in cfg.policies:
        for seed in cfg.seeds:
            path = run_dir / "models" / spec.label / f"seed{seed}"
            model = Generator.load(path)
            widths = [1] + (cfg.beam_widths if spec.label in cfg.beam_policies else [])
            for width in widths:
                name = f"{spec.label} seed{seed}" + (f" beam{width}" if width > 1 else "")
                model.predict_sequences(X[:4], beam_width=width)  # warm-up
                best, best_cpu, pred = np.inf, np.inf, None
                for _ in range(repeats):
                    pred = model.predict_sequences(X, beam_width=width)
                    best, best_cpu = min(best, pred.seconds), min(best_cpu, pred.cpu_seconds)
                m = policy_metrics(world, X, pred, seq_cost, exact["cost"], best)
                m["cpu_ms_per_agent"] = 1000 * best_cpu / len(X)
                m["beam_width"] = width
                m["train_seconds"] = json.loads((path / "train_info.json").read_text())["train_seconds"] \
                    if (path / "train_info.json").exists() else None
                m["fit"] = getattr(model, "fit_info_", {}) if width == 1 else {}
                m["speedup_vs_sequencer"] = seq["s_per_agent"] * 1000 / max(m["ms_per_agent"], 1e-9)
                results["models"][name] = m
                log(f"  {name}: validity {m['validity']:.3f}, cost/sequencer "
                    f"{m['mean_cost_ratio_to_sequencer']}, {m['ms_per_agent']:.2f} ms/agent")
    (run_dir / "metrics.json").write_text(json.dumps(results, indent=2, default=float))
    (run_dir / "report.md").write_text("\n".join([report_table(results), *where_raw_policies_lose(results)]))
    return results


def versus(m: dict[str, Any], other: dict[str, Any]) -> float | None:
    """Summed cost of ``m`` over the agents where both answers are valid, divided by ``other``'s."""
    a, b = np.asarray(m["_costs"]), np.asarray(other["_costs"])
    both = np.isfinite(a) & np.isfinite(b)
    return float(a[both].sum() / b[both].sum()) if both.any() else None


def where_raw_policies_lose(res: dict[str, Any], reference: str = "lookahead2 seed0",
                            title: str = "the two-step lookahead") -> list[str]:
    """The cheapest valid raw learned policy (any seed) against ``reference`` (named ``title`` in
    the heading), agent by agent (:func:`losses_to`); nothing if either is missing."""
    raw = {k: m for k, m in res["models"].items()
           if not k.startswith("lookahead") and m.get("beam_width", 1) == 1 and m["validity"] >= 0.99}
    if reference not in res["models"] or not raw:
        return []
    best = min(raw, key=lambda k: versus(raw[k], res["models"][reference]) or np.inf)
    return [f"Where the cheapest raw learned policy loses to {title}:", "",
            *losses_to(res, best, reference)]


def losses_to(res: dict[str, Any], model: str, reference: str, n: int = 5) -> list[str]:
    """Markdown: on how many held-out agents ``model``'s answer costs more / less than
    ``reference``'s (both evaluated in ``res``), and its ``n`` largest losses with both sequences
    and the sequencer's cost: where a policy loses, and what the cheaper answer does instead."""
    m, r = res["models"][model], res["models"][reference]
    a, b = np.asarray(m["_costs"]), np.asarray(r["_costs"])
    seq = np.asarray(res["sequencer"]["_costs"]) if "_costs" in res["sequencer"] else np.full(len(a), np.nan)
    both = np.isfinite(a) & np.isfinite(b)
    d = np.where(both, a - b, np.nan)
    worse, better = int((d > 1e-9).sum()), int((d < -1e-9).sum())
    lines = [f"**{model}** against **{reference}**: dearer on {worse}, cheaper on {better}, equal on "
             f"{int(both.sum()) - worse - better} of {int(both.sum())} agents where both are valid; the summed "
             f"excess is {np.nansum(d):+.3f} on a total of {b[both].sum():.3f}. Largest losses:", "",
             f"| agent | {model} | cost | {reference} | cost | sequencer's cost |", "|---|---|---|---|---|---|"]

    def show(steps: list) -> str:
        return " → ".join(name if v is None else f"{name} {v:g}" for name, v in steps) or "–"

    for i in [int(i) for i in np.argsort(-np.nan_to_num(d, nan=-np.inf))[:n] if d[i] > 1e-9]:
        lines.append(f"| {i} | {show(m['_steps'][i])} | {a[i]:.3f} | {show(r['_steps'][i])} | {b[i]:.3f} | "
                     f"{seq[i]:.3f} |")
    return lines + [""]


def _f(v: Any, fmt: str = ".3f") -> str:
    return "–" if v is None else format(v, fmt)


def report_table(res: dict[str, Any]) -> str:
    """The markdown table of one evaluated run."""
    s, e = res["sequencer"], res["exact"]
    lines = [f"### {res['world']}: {res['test_agents']} held-out rejected agents "
             f"({res['train_agents']} training agents)", "",
             "| method | validity | mean cost | cost / sequencer | share cheaper than sequencer | "
             "regret to exact | share exact-optimal | length | order: cheaper than another / cheapest | "
             "time per agent |", "|---|---|---|---|---|---|---|---|---|---|",
             f"| sequencer (BRKGA, {s['generations']} gen.) | {_f(s['validity'])} | {_f(s['mean_cost'], '.4f')} | 1 | – | "
             f"{_f(s['mean_regret_to_exact'], '+.4f')} | {_f(s['share_exact_optimal'])} | {_f(s['mean_length'], '.2f')} | "
             f"– | {s['s_per_agent']:.2f} s |",
             f"| exact grid reference (<= {e['max_length']} steps) | {_f(e['found'])} | {_f(e['mean_cost'], '.4f')} | – | "
             f"{_f(s.get('share_beatable'))} | 0 | 1 | – | – | {e['s_per_agent']:.2f} s |"]
    for name, m in res["models"].items():
        order = (f"{_f(m['share_cheaper_than_another_order'], '.2f')} / {_f(m['share_cheapest_order'], '.2f')} "
                 f"(n={m['multi_step_answers']})")
        lines.append(f"| {name} | {_f(m['validity'])} | {_f(m['mean_cost'], '.4f')} | "
                     f"{_f(m['mean_cost_ratio_to_sequencer'])} | {_f(m['share_cheaper_than_sequencer'])} | "
                     f"{_f(m['mean_regret_to_exact'], '+.4f')} | {_f(m['share_exact_optimal'])} | "
                     f"{_f(m['mean_length'], '.2f')} | {order} | {m['ms_per_agent']:.2f} ms "
                     f"({_f(m.get('cpu_ms_per_agent'), '.2f')} ms CPU) |")
    return "\n".join(lines) + "\n"
