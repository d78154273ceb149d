"""Named-CFE accuracy with plain argmax vs verified top-k decoding, on trained runs.

    python benchmarks/verified_topk.py RUN_DIR [RUN_DIR ...] [--k 1 5 20 50]

For every named-CFE model (every filter and seed) of each run, on the run's held-out split:
exact-set accuracy of the argmax and of ``evaluation.verified.verified_top_k`` for each k, and the
decoding time per agent. Prints markdown and writes ``benchmarks/results/verified_topk.json`` (+ ``.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.warmup import warming_up  # noqa: E402
from evaluation.experiment import load_run  # noqa: E402
from evaluation.metrics import exact_match  # noqa: E402
from evaluation.verified import verified_top_k  # noqa: E402
from learners.base import Generator  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run directories")
    p.add_argument("--k", type=int, nargs="+", default=[5, 20, 50], help="candidates per agent")
    p.add_argument("--out", default="benchmarks/results/verified_topk.json", help="JSON output")
    args = p.parse_args(argv)
    rows, lines = [], []
    emit = lambda line: (print(line, flush=True), lines.append(line))  # noqa: E731
    emit("| run | filter | seed | test agents | argmax | " + " | ".join(f"top-{k}" for k in args.k)
          + f" | µs/agent (top-{args.k[-1]}) |")
    emit("|---|---|---|---|---|" + "---|" * len(args.k) + "---|")
    for run in args.runs:
        cfg, ds = load_run(run)
        for cfg_dir in sorted(Path(run, "models").glob("*/*/seed*/config.json")):
            mdir = cfg_dir.parent
            meta = json.loads(cfg_dir.read_text())
            if meta["method"] != "named_cfe":
                continue
            rule = mdir.parent.name.replace("gt", ">")
            _, test = ds.split(rule, cfg.evaluation.test_fraction)
            model = Generator.load(mdir)
            groups = test.groups if ds.world.n_groups > 1 else None
            row = {"run": run, "filter": rule, "seed": mdir.name, "n": len(test),
                   "argmax": float(exact_match(model.predict(test.X).sets, test.sets).mean())}
            with warming_up(f"verified top-k (k = {', '.join(map(str, args.k))}) on 8 agents"):
                for k in args.k:
                    verified_top_k(model, ds.world, test.X[:8], None if groups is None else groups[:8], k=k)
            for k in args.k:
                t = time.perf_counter()
                pred = verified_top_k(model, ds.world, test.X, groups, k=k)
                row[f"us_{k}"] = (time.perf_counter() - t) / len(test) * 1e6
                row[f"top{k}"] = float(exact_match(pred.sets, test.sets).mean())
            rows.append(row)
            emit(f"| {Path(run).name} | {rule} | {mdir.name} | {len(test)} | {row['argmax']:.3f} | "
                 + " | ".join(f"{row[f'top{k}']:.3f}" for k in args.k) + f" | {row[f'us_{args.k[-1]}']:.0f} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    Path(args.out).with_suffix(".md").write_text("# Named CFE: argmax vs verified top-k (exact-set accuracy)\n\n"
                                                 + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
