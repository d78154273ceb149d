"""Labelling speed: CVXPY per agent vs the compiled exact branch and bound, in one run.

    python benchmarks/labelling.py [--features 20 50 100] [--agents 2000] [--cvxpy-agents N]
                                   [--scale-agents 100000] [--out results.json]

For each feature count: a paper-style world (A = 100 actions, pa = 0.5, integer coordinate
costs in [1, n]) and negatively classified agents (pf = 0.68). The same agents are labelled by
CVXPY (HiGHS, one ILP per agent, no uniqueness check) and by the fast path (with its
uniqueness check), and their optimal costs compared. ``--scale-agents`` then times the fast
path with uniqueness on that many agents. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.warmup import warming_up  # noqa: E402
from data_gen.config import SyntheticDatasetConfig  # noqa: E402
from data_gen.synthetic import make_world  # noqa: E402
from solvers.setcover_fast import FastSetCover  # noqa: E402
from solvers.setcover_ilp import CvxpySetCover  # noqa: E402


def negative_agents(world, n_agents: int, pf: float, rng: np.random.Generator) -> np.ndarray:
    X = (rng.random((int(n_agents * 1.2) + 10, world.n_features)) < pf).astype(np.uint8)
    return X[~world.accepts(X)][:n_agents]


def run(n: int, agents: int, cvxpy_agents: int, scale_agents: int, seed: int) -> dict:
    cfg = SyntheticDatasetConfig(n_features=n, n_agents=agents, seed=seed)
    rng = np.random.default_rng(seed)
    world = make_world(cfg, rng)
    X = negative_agents(world, agents, cfg.pf, rng)
    fast = FastSetCover(dedupe=False)  # per-agent work, no sharing between identical agents
    with warming_up(f"the fast path (with and without dedupe) and CVXPY on a few agents (n={n})"):
        fast.label_batch(world, X[:4])
        FastSetCover(dedupe=True).label_batch(world, X[:4])
        CvxpySetCover(check_unique=False).label_batch(world, X[:1])
    t = time.perf_counter()
    lab = fast.label_batch(world, X)
    fast_s = time.perf_counter() - t
    k = min(cvxpy_agents, len(X))
    t = time.perf_counter()
    ref = CvxpySetCover(check_unique=False).label_batch(world, X[:k])
    cvx_s = time.perf_counter() - t
    agree = bool(np.allclose(lab.cost[:k], ref.cost, rtol=1e-9))
    out = {
        "n_features": n, "n_actions": world.n_actions, "agents": len(X), "cvxpy_agents": k,
        "cvxpy_agents_per_s": k / cvx_s, "cvxpy_ms_per_agent": 1e3 * cvx_s / k,
        "fast_agents_per_s": len(X) / fast_s, "fast_ms_per_agent": 1e3 * fast_s / len(X),
        "speedup": (cvx_s / k) / (fast_s / len(X)), "optimal_costs_agree": agree,
        "cfe_lengths": {str(i): int(c) for i, c in enumerate(np.bincount(lab.length)) if c},
        "unique_share": float((lab.n_optimal == 1).mean()),
    }
    if scale_agents:
        Xs = negative_agents(world, scale_agents, cfg.pf, np.random.default_rng(seed + 1))
        for dedupe in (False, True):
            t = time.perf_counter()
            FastSetCover(dedupe=dedupe).label_batch(world, Xs)
            out[f"scale_{len(Xs)}_agents_seconds{'_dedupe' if dedupe else ''}"] = time.perf_counter() - t
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--features", type=int, nargs="+", default=[20, 50, 100], help="feature counts n")
    p.add_argument("--agents", type=int, default=2000, help="agents labelled by both methods")
    p.add_argument("--cvxpy-agents", type=int, default=None, help="label only the first N with CVXPY (default: all)")
    p.add_argument("--scale-agents", type=int, default=100_000, help="agents for the fast-path scale run (0: skip)")
    p.add_argument("--seed", type=int, default=0, help="world and agent seed")
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    results = {"cores": os.cpu_count(), "runs": []}
    for n in args.features:
        results["runs"].append(run(n, args.agents, args.cvxpy_agents or args.agents, args.scale_agents, args.seed))
        print(json.dumps(results["runs"][-1]), file=sys.stderr, flush=True)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
