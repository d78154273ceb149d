"""RL policies on the 20-feature capability world, with and without consequential discounts.

    python benchmarks/rl.py [--agents 20000] [--edges 40] [--ppo-steps 200000] [--bc-epochs 30]
                            [--finetune-steps 50000] [--bc-label-agents 8000] [--exact-agents 1000]
                            [--out benchmarks/results/rl.json] [--md benchmarks/results/rl.md] [--quick]

For each setting (no discounts; ``--edges`` random consequence edges) a dataset of ``--agents``
agents (20 features, 100 actions, paper defaults; built by data_gen, 80/20 split) is made, and
three policies are trained on the training agents: RL only (``maskable_ppo``), BC only (``bc``)
and BC + RL (``bc_ppo``). Each is evaluated on the test agents by
:func:`evaluation.policy_eval.policy_metrics`: optimality against the exact optimum (FastSetCover
on every test agent without discounts; UniformCostSearch on the first ``--exact-agents`` with
them), validity of the raw greedy rollout (no completion by a solver), regret, steps, and the
batched inference time per agent beside the exact solver's time per agent in the same run.
A reference row, ``lookahead argmin``, is the ``lookahead`` policy
(:class:`learners.policies.lookahead.LookaheadPolicy`): the argmin of the policies' two-step
lookahead feature with no learning at all, what the input features alone achieve.

Prints JSON and writes a markdown table. Training runs are logged under
``benchmarks/results/runs/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.warmup import warming_up  # noqa: E402
from data_gen.config import SyntheticDatasetConfig  # noqa: E402
from data_gen.dataset import build_dataset  # noqa: E402
from evaluation.policy_eval import exact_optimum, policy_metrics  # noqa: E402
from evaluation.report import ratio  # noqa: E402
from learners.base import FitContext, build_generator  # noqa: E402

ROOT = Path(__file__).resolve().parent


def run_setting(edges: int, args: argparse.Namespace, log) -> dict[str, Any]:
    cfg = SyntheticDatasetConfig(n_features=20, n_agents=args.agents, n_discount_edges=edges, seed=args.seed)
    ds = build_dataset(cfg, args.data_dir, f"rl20_d{edges}", progress=False)
    train, test = ds.split("all", 0.2)
    world = ds.world
    log(f"[edges={edges}] dataset: {len(ds)} agents kept of {args.agents}, train {len(train)}, test {len(test)}")
    with warming_up("the exact solver on two agents"):
        exact_optimum(world, test.X[:2], None, None if edges == 0 else 2)
    t = time.perf_counter()
    exact = exact_optimum(world, test.X, None, None if edges == 0 else args.exact_agents)
    log(f"[edges={edges}] exact optimum ({exact['solver']}) on {exact['agents']} test agents in "
        f"{time.perf_counter() - t:.1f}s")
    specs = {
        "RL only (maskable_ppo)": ("maskable_ppo", {"total_timesteps": args.ppo_steps}),
        "BC only (bc)": ("bc", {"bc_epochs": args.bc_epochs, "bc_label_agents": args.bc_label_agents}),
        "BC + RL (bc_ppo)": ("bc_ppo", {"bc_epochs": args.bc_epochs, "bc_label_agents": args.bc_label_agents,
                                        "total_timesteps": args.finetune_steps}),
    }
    for _, p in specs.values():
        p["lookahead_prior"] = args.prior
    if args.quick:
        for _, p in specs.values():
            p.update({"eval_freq": 1024, "n_eval_episodes": 10})
    out: dict[str, Any] = {"n_discount_edges": edges, "dataset": {
        "agents_generated": args.agents, "agents_kept": len(ds), "train": len(train), "test": len(test),
        "optimal_lengths": {str(k): int(v) for k, v in enumerate(np.bincount(test.length)) if v}},
        "policies": {}}
    for label, (method, params) in specs.items():
        run_dir = ROOT / "results" / "runs" / f"d{edges}" / method
        model = build_generator(method, params)
        ctx = FitContext.from_world(world, int(ds.length.max()), seed=args.seed, run_dir=run_dir / "training",
                                    progress=False)
        t = time.perf_counter()
        model.fit(train, None, ctx)
        seconds = time.perf_counter() - t
        model.save(run_dir)
        with warming_up(f"{method} on 8 agents"):  # policy_metrics warms up too; then nothing is left to compile
            model.predict_sequences(test.X[:8], None)
        m = policy_metrics(model, world, test.X, exact=exact)
        info = model.fit_info_
        m["train_seconds"] = seconds
        m["train"] = {k: info[k] for k in ("train_agents", "heldout_agents", "rl_seconds") if k in info}
        if "bc" in info:
            m["train"]["bc"] = {k: v for k, v in info["bc"].items() if k != "epoch_loss"}
        m["params"] = params
        out["policies"][label] = m
        log(f"[edges={edges}] {label}: optimality {m['optimality']['value']:.4f}, validity "
            f"{m['validity']['value']:.4f}, regret {m['mean_regret']:.5f}, "
            f"{1e6 * m['inference_s_per_agent']:.1f} µs/agent, trained in {seconds:.0f}s")
    lookahead = build_generator("lookahead", {}).fit(train, None, FitContext.from_world(world, int(ds.length.max())))
    with warming_up("lookahead on 8 agents"):
        lookahead.predict_sequences(test.X[:8], None)
    out["policies"]["lookahead argmin (no learning)"] = policy_metrics(lookahead, world, test.X, exact=exact)
    return out


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# RL policies on the 20-feature capability world",
        "",
        f"Generated by `python benchmarks/rl.py` ({results['machine']}, torch threads "
        f"{results['torch_threads']}; lookahead prior {'on' if results['args']['prior'] else 'off (--no-prior)'}). "
        "Raw greedy rollouts: no solver completes or repairs an answer.",
        "Optimality: the policy's sequence, priced in its own order, costs no more than the exact optimum "
        "(FastSetCover on every test agent without discounts; UniformCostSearch on the first "
        f"{results['args']['exact_agents']} test agents with discounts). Times per agent: the policy's "
        "batched greedy rollout over all test agents vs the exact solver, in the same run.",
        "",
        "| setting | policy | optimality (±95%) | validity | not accepted | mean regret | max regret | "
        "mean steps | infer µs/agent | exact ms/agent | × exact | train s |",
        "|" + "---|" * 12,
    ]
    for s in results["settings"]:
        name = "no discounts" if s["n_discount_edges"] == 0 else f"{s['n_discount_edges']} discount edges"
        for label, m in s["policies"].items():
            opt, trained = m["optimality"], f"{m['train_seconds']:.0f}" if "train_seconds" in m else "-"
            lines.append(
                f"| {name} | {label} | {opt['value']:.4f} ± {opt['ci95']:.4f} (n={opt['n']}) | "
                f"{m['validity']['value']:.4f} | {m['not_accepted']} | {m['mean_regret']:.5f} | "
                f"{m['max_regret']:.4f} | {m['mean_steps']:.2f} | {1e6 * m['inference_s_per_agent']:.1f} | "
                f"{1e3 * m['exact_s_per_agent']:.3f} ({m['exact_solver']}) | {ratio(m['speedup_vs_exact'])} | "
                f"{trained} |")
    for s in results["settings"]:
        sc = next(iter(s["policies"].values())).get("set_cover_vs_ucs")
        if not sc:
            continue
        pol = {k: m["set_cover_vs_ucs"]["policy_optimal_where_set_cover_best_order_is_not"]
               for k, m in s["policies"].items()}
        lines += [
            "",
            f"**Order matters ({s['n_discount_edges']} discount edges, {sc['best_order_suboptimal']['n']} test "
            "agents vs UniformCostSearch).** The order-blind set-cover answer (FastSetCover, exact for the "
            "sum of efforts):",
            "",
            f"- priced in canonical (ascending) order: costlier than the ordered optimum on "
            f"{sc['canonical_order_suboptimal']['value']:.1%} of agents (mean regret "
            f"{sc['canonical_order_mean_regret']:.4f});",
            f"- priced in its best order (every permutation of the set): still costlier on "
            f"{sc['best_order_suboptimal']['value']:.1%} (mean regret {sc['best_order_mean_regret']:.4f}): "
            "there the optimal *set* itself differs;",
            f"- UCS optima longer than 3 actions: {sc['ucs_longer_than_3']}.",
            "- On the agents where even the best-ordered set cover is suboptimal, the policies are optimal on: "
            + "; ".join(f"{k} {v['value']:.1%} (n={v['n']})" for k, v in pol.items()) + ".",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", type=int, default=20_000, help="agents generated per dataset (before filtering)")
    ap.add_argument("--edges", type=int, default=40, help="consequence edges of the discounted setting")
    ap.add_argument("--ppo-steps", type=int, default=200_000, help="environment steps of RL-only MaskablePPO")
    ap.add_argument("--bc-epochs", type=int, default=30, help="behaviour-cloning epochs")
    ap.add_argument("--finetune-steps", type=int, default=50_000, help="PPO fine-tuning steps after BC")
    ap.add_argument("--bc-label-agents", type=int, default=8000, help="training agents labelled by UCS (discounts)")
    ap.add_argument("--exact-agents", type=int, default=1000, help="test agents solved by UCS (discounts)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default="data_cache")
    ap.add_argument("--out", default=str(ROOT / "results" / "rl.json"))
    ap.add_argument("--md", default=str(ROOT / "results" / "rl.md"))
    ap.add_argument("--no-prior", dest="prior", action="store_false",
                    help="ablation: policies without the lookahead residual prior (lookahead_prior=False)")
    ap.add_argument("--quick", action="store_true", help="tiny budgets: a smoke test of the script")
    args = ap.parse_args()
    if args.quick:
        args.agents, args.ppo_steps, args.bc_epochs, args.finetune_steps = 3000, 2048, 2, 2048
        args.bc_label_agents, args.exact_agents = 200, 50
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    results = {"args": vars(args), "machine": f"{platform.processor() or platform.machine()}, "
               f"{os.cpu_count()} CPUs", "torch_threads": 1,
               "settings": [run_setting(e, args, log) for e in (0, args.edges)]}
    results["seconds"] = time.perf_counter() - t0
    text = json.dumps(results, indent=2, default=float)
    print(text)
    log(markdown(results))
    if not args.quick:
        Path(args.out).write_text(text)
        Path(args.md).write_text(markdown(results))


if __name__ == "__main__":
    main()
