"""Labelling throughput on Ray with 1 and 2 workers per labeller, and a projection to 10^6 / 10^8 agents.

    python benchmarks/scale.py [--labellers setcover mace sequencer] [--setcover-agents N] [--mace-agents N]
                               [--sequencer-agents N] [--workers 1 2] [--address auto] [--out results.json]

For each labeller the same agents are labelled three ways in one run: in this process (the
local backend, the baseline), and as Ray tasks on a local instance with 1 and with 2 worker
CPUs (``compute: {backend: ray}``). The labels of every run are checked identical to the
baseline's. The projection divides the measured seconds per chunk by the workers a cluster
would have: wall(N) = ceil(N / chunk_size) * seconds_per_chunk / workers (no queueing or
network time; the per-chunk cost is what one worker core spends).

Multi-node: start a head (``ray start --head``), join workers (``ray start --address HEAD:6379``),
then set ``compute: {backend: ray, address: auto}`` in the config (or pass ``--address auto``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.warmup import warming_up  # noqa: E402
from data_gen.compute import ComputeConfig, ray_environment  # noqa: E402

Run = Callable[..., Any]  # run(work, compute, n=None): label the first n agents (None: all)


def setcover_labeller(agents: int) -> tuple[Run, int, dict]:
    """The compiled exact set cover on a 50-feature paper world (chunks of 5,000 agents)."""
    from data_gen.config import SyntheticDatasetConfig
    from data_gen.labelling import label_population
    from data_gen.synthetic import make_world
    from solvers.setcover_fast import FastSetCover

    cfg = SyntheticDatasetConfig(n_features=50, n_agents=agents, seed=0)
    rng = np.random.default_rng(0)
    world = make_world(cfg, rng)
    X = (rng.random((agents * 2, 50)) < cfg.pf).astype(np.uint8)
    X = X[~world.accepts(X)][:agents]
    solver = FastSetCover(dedupe=False)
    chunk = 5_000

    def run(work: Path, compute: ComputeConfig, n: int | None = None) -> Any:
        labels, _ = label_population(world, X[:n], None, solver, work, chunk, progress=False, compute=compute)
        return np.concatenate([labels.cost, labels.actions.ravel().astype(float)])

    return run, chunk, {"world": "synthetic n=50, A=100", "agents": len(X)}


def mace_labeller(agents: int) -> tuple[Run, int, dict]:
    """MACE (MILP, l1) on the Adult forest (chunks of 5 agents)."""
    from data_gen.classifiers import build, negatives
    from data_gen.mace_labels import label_tabular
    from solvers.mace import MACE

    b = build("adult", "forest")
    X = negatives(b.world, b.data.X_test)[:agents]
    chunk = 5

    def run(work: Path, compute: ComputeConfig, n: int | None = None) -> Any:
        labels = label_tabular(b.world, X[:n], MACE(backend="milp", norm="one"), work, chunk_size=chunk,
                               progress=False, compute=compute)
        return np.concatenate([np.nan_to_num(labels.cf).ravel(), np.nan_to_num(labels.distance, posinf=-1)])

    return run, chunk, {"world": "adult/forest", "agents": len(X)}


def sequencer_labeller(agents: int) -> tuple[Run, int, dict]:
    """The BRKGA sequencer with the CSCF settings on the Adult sequential world (chunks of 2 agents)."""
    from data_gen.sequence_labels import label_sequences
    from data_gen.sequential_worlds import build_sequential, rejected_agents
    from solvers.sequential import BRKGASequencer

    built = build_sequential("adult")
    X = rejected_agents(built, agents, seed=0)
    chunk = 2

    def run(work: Path, compute: ComputeConfig, n: int | None = None) -> Any:
        labels = label_sequences(built.world, X[:n], work, BRKGASequencer(), chunk_size=chunk, progress=False,
                                 compute=compute)
        return np.concatenate([labels.cost, np.nan_to_num(labels.values).ravel(), labels.actions.ravel()])

    return run, chunk, {"world": "adult (cscf), BRKGA 500/150", "agents": len(X)}


LABELLERS: dict[str, Callable[[int], tuple[Run, int, dict]]] = {
    "setcover": setcover_labeller, "mace": mace_labeller, "sequencer": sequencer_labeller,
}
DEFAULT_AGENTS = {"setcover": 100_000, "mace": 60, "sequencer": 12}


def measure(name: str, agents: int, workers: list[int], address: str | None) -> dict[str, Any]:
    import ray

    run, chunk, info = LABELLERS[name](agents)
    out: dict[str, Any] = {"labeller": name, **info, "chunk_size": chunk, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        with warming_up(f"{name} on one agent in this process"):
            run(Path(tmp) / "warm-local", ComputeConfig(), 1)
        t = time.perf_counter()
        reference = run(Path(tmp) / "local", ComputeConfig())
        local_s = time.perf_counter() - t
        out["runs"].append({"backend": "local (in process)", "workers": 1, "seconds": round(local_s, 3),
                            "agents_per_s": round(info["agents"] / local_s, 2)})
        for w in workers:
            ray.shutdown()
            ray_environment(local=address is None)
            ray.init(address=address, num_cpus=None if address else w, include_dashboard=False,
                     log_to_driver=False)
            compute = ComputeConfig(backend="ray", address=address, n_workers=w)
            with warming_up(f"{name} on {w} chunk(s) on the Ray workers"):
                run(Path(tmp) / f"warm-ray{w}", compute, chunk * w)  # a chunk per worker (as Ray schedules them)
            t = time.perf_counter()
            labels = run(Path(tmp) / f"ray{w}", compute)
            s = time.perf_counter() - t
            out["runs"].append({"backend": "ray", "workers": w, "seconds": round(s, 3),
                                "agents_per_s": round(info["agents"] / s, 2),
                                "speedup_vs_local": round(local_s / s, 2),
                                "identical_to_local": bool(np.array_equal(labels, reference))})
        ray.shutdown()
    n_chunks = math.ceil(info["agents"] / chunk)
    per_chunk = local_s / n_chunks  # one core's cost of a chunk, measured in process
    out["seconds_per_chunk"] = round(per_chunk, 4)
    out["projection_hours"] = {
        f"{n:.0e} agents on {w} cores": round(math.ceil(n / chunk) * per_chunk / w / 3600, 3)
        for n in (1e6, 1e8) for w in (2, 64, 1024)
    }
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--labellers", nargs="+", default=list(LABELLERS), choices=list(LABELLERS))
    for name, n in DEFAULT_AGENTS.items():
        p.add_argument(f"--{name}-agents", type=int, default=n, help=f"agents labelled by {name}")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="Ray worker CPUs to try")
    p.add_argument("--address", default=None, help="an existing Ray cluster ('auto' or 'ray://host:port')")
    p.add_argument("--out", default="benchmarks/results/scale.json")
    args = p.parse_args(argv)
    results = [measure(n, getattr(args, f"{n}_agents"), args.workers, args.address) for n in args.labellers]
    report = {"cpu_count": os.cpu_count(), "load_average": os.getloadavg(), "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
