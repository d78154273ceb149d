"""How fast can a learned policy's verified beam be? Its measured time beside a floor (issue 14).

A beam node computes and scores its whole (action, value) grid of children (265 on German), so a
beam's time is about proportional to the children it scores (``SequencePrediction.search``). This
script runs a trained policy's beam at several widths on a run's held-out agents, beside the
run's exhaustive two-step lookahead, and for each width times two matrix products alone on as
many rows as the beam scored children:

- the world classifier's later layers (``mlp_tail``: every child's decision score, which the
  policies read as a feature and the beam needs to find completions);
- the policy network's scorer layers after its split first layer.

These two are a floor on this machine: any implementation that scores those children with this
classifier and this network does at least this arithmetic (the rest of a node's work, the
transitions, the two-step estimate and the features, comes on top). The rows are random: the time
of a dense product does not depend on the values.

    OMP_NUM_THREADS=1 python benchmarks/sequential_beam_floor.py [--run runs/sequential_german]

Needs a run trained by ``benchmarks/sequential_rl.py`` (or ``train.py`` on its config).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.warmup import warming_up  # noqa: E402
from data_gen.sequence_labels import SequenceLabelSet  # noqa: E402
from envs.sequential import SequentialWorld  # noqa: E402
from envs.sequential_candidates import mlp_tail  # noqa: E402
from evaluation.sequential_experiment import load_sequential_config, versus  # noqa: E402
from learners.base import Generator  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def _best_cpu(fn: Any, repeats: int) -> tuple[float, Any]:
    """Least CPU seconds of ``repeats`` calls of ``fn`` (a busy machine does not inflate CPU time), and
    the last result."""
    best, out = np.inf, None
    for _ in range(repeats):
        c0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - c0)
    return best, out


def _valid_costs(pred: Any) -> dict[str, Any]:
    """An answer's costs as :func:`versus` reads them (NaN where the answer is not valid)."""
    return {"_costs": np.where(pred.accepted, pred.cost, np.nan)}


def floor_ms(world: SequentialWorld, net: torch.nn.Module | None, rows: int, repeats: int,
             blocks: tuple[int, ...] = (1024, 4096, 16384, 65536)) -> dict[str, float]:
    """CPU ms of the classifier's later layers and of the scorer's layers after the first on
    ``rows`` children (float32, as the beam computes them), in blocks of rows of the size that is
    fastest on this machine (of ``blocks``: small blocks stay in cache, large ones amortize calls)."""
    out: dict[str, float] = {}
    rng = np.random.default_rng(0)
    weights = getattr(world.model, "weights", None)
    pre = None
    if weights is not None and getattr(world.model, "kind", "") == "mlp":
        pre = rng.normal(size=(rows, weights[0].shape[1])).astype(np.float32)
    scorer = getattr(net, "scorer", None)
    h = None if scorer is None else torch.randn(rows, scorer[0].out_features)

    def tail(b: int, n: int = rows) -> None:
        with torch.inference_mode():
            for s in range(0, n, b):
                x = h[s: s + b].relu()
                for layer in scorer[2:]:
                    x = x.relu_() if isinstance(layer, torch.nn.ReLU) else layer(x)

    with warming_up("the floor's products on one block"):
        if pre is not None:
            mlp_tail(world.model, pre[: blocks[0]])
        if h is not None:
            tail(blocks[0], min(rows, blocks[0]))
    if pre is not None:
        out["classifier_ms"] = 1e3 * min(
            _best_cpu(lambda b=b: [mlp_tail(world.model, pre[s: s + b]) for s in range(0, rows, b)], repeats)[0]
            for b in blocks)
    if h is not None:
        out["scorer_ms"] = 1e3 * min(_best_cpu(lambda b=b: tail(b), repeats)[0] for b in blocks)
    return out


def measure(run_dir: Path, model: str, seed: int, widths: list[int], baseline: str, repeats: int,
            log: Any = print) -> dict[str, Any]:
    cfg = load_sequential_config(run_dir / "config.yaml")
    info = json.loads((run_dir / "labels.json").read_text())
    X = SequenceLabelSet.load(info["path"]).X[: cfg.test_agents]
    for name in (model, baseline):
        if not (run_dir / "models" / name / f"seed{seed}").exists():
            raise FileNotFoundError(f"{run_dir}/models/{name}/seed{seed}: not trained; run benchmarks/sequential_rl.py")
    policy = Generator.load(run_dir / "models" / model / f"seed{seed}")
    base = Generator.load(run_dir / "models" / baseline / f"seed{seed}")
    world = policy.world_
    with warming_up(f"{baseline} on 4 agents"):
        base.predict_sequences(X[:4])
    base_cpu, ref = _best_cpu(lambda: base.predict_sequences(X), repeats)
    out: dict[str, Any] = {"run": str(run_dir), "world": world.name, "agents": int(len(X)), "model": f"{model} seed{seed}",
                           "baseline": {"name": baseline, "cpu_ms_per_agent": 1e3 * base_cpu / len(X),
                                        "validity": float(ref.accepted.mean())},
                           "widths": []}
    log(f"{baseline}: {out['baseline']['cpu_ms_per_agent']:.2f} ms per agent")
    for width in widths:
        with warming_up(f"{model}'s beam of width {width} on 4 agents"):
            policy.predict_sequences(X[:4], beam_width=width)
        cpu, pred = _best_cpu(lambda w=width: policy.predict_sequences(X, beam_width=w), repeats)
        scored = pred.search["scored_per_agent"]
        rows = int(round(scored * len(X)))
        fl = floor_ms(world, getattr(policy, "net_", None), rows, repeats)
        row = {"width": width, "cpu_ms_per_agent": 1e3 * cpu / len(X), "validity": float(pred.accepted.mean()),
               "cost_to_baseline": versus(_valid_costs(pred), _valid_costs(ref)),
               "scored_per_agent": scored, "nodes_per_agent": pred.search.get("nodes_per_agent"),
               **{k: v / len(X) for k, v in fl.items()}}
        row["floor_ms_per_agent"] = sum(row.get(k, 0.0) for k in ("classifier_ms", "scorer_ms"))
        row["ns_per_child"] = 1e6 * row["cpu_ms_per_agent"] / scored
        row["floor_ns_per_child"] = 1e6 * row["floor_ms_per_agent"] / scored
        out["widths"].append(row)
        log(f"width {width}: {row['cost_to_baseline']:.4f}x {baseline}, {row['cpu_ms_per_agent']:.2f} ms per agent, "
            f"{scored:.0f} children scored per agent, floor {row['floor_ms_per_agent']:.2f} ms")
    return out


def report(res: dict[str, Any]) -> str:
    b = res["baseline"]
    lines = [f"## {res['world']}: {res['model']}, {res['agents']} held-out agents", "",
             f"Baseline `{b['name']}`: {b['cpu_ms_per_agent']:.2f} ms per agent (CPU), validity {b['validity']:.3f}.", "",
             "| beam width | cost / baseline | ms per agent (CPU) | children scored per agent | ns per child |"
             " floor: classifier ms | floor: scorer ms | floor ms per agent |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["widths"]:
        lines.append(f"| {r['width']} | {r['cost_to_baseline']:.4f} | {r['cpu_ms_per_agent']:.2f} | "
                     f"{r['scored_per_agent']:.0f} | {r['ns_per_child']:.0f} | {r.get('classifier_ms', float('nan')):.2f} | "
                     f"{r.get('scorer_ms', float('nan')):.2f} | {r['floor_ms_per_agent']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", default="runs/sequential_german", help="a trained sequential run directory")
    ap.add_argument("--model", default="seq_bc_exact", help="the policy whose beam is measured")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="its seeds (each a saved model)")
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 2, 4, 8], help="beam widths (1: raw rollout)")
    ap.add_argument("--baseline", default="lookahead2", help="the no-learning baseline of the same run")
    ap.add_argument("--repeats", type=int, default=3, help="best of this many timed calls")
    ap.add_argument("--out", default=str(RESULTS / "sequential_beam_floor.md"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    results = [measure(Path(args.run), args.model, s, args.widths, args.baseline, args.repeats) for s in args.seeds]
    out = Path(args.out)
    header = ["# The time of a learned policy's verified beam, and its floor (issue 14)", "",
              f"`OMP_NUM_THREADS=1 python benchmarks/sequential_beam_floor.py --run {args.run} --model {args.model}` "
              f"(one thread, CPU time, best of {args.repeats}; {time.perf_counter() - t0:.0f} s in all). "
              "*cost / baseline*: summed cost over the agents where both answers are valid. *children scored*: "
              "states expanded x grid size (width 1: the raw rollout's). *floor*: the classifier's "
              "later layers and the policy scorer's layers after the first, timed alone on as many random rows "
              "as the beam scored children, in the fastest of several block sizes (module doc). 1 ms per agent leaves 1e6 / children scored ns per child.",
              ""]
    out.write_text("\n".join(header + [report(r) + "\n" for r in results]))
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
