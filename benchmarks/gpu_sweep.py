"""Hyperparameter sweep: fit generator configurations side by side (one process each) and print
train / test exact-set accuracy. Made for a GPU machine; ``benchmarks/results/gpu_sweep.jsonl``
holds the sweep that chose the ``gpu`` budget and MCf's parameters in ``paper_tables.py``.

    python benchmarks/gpu_sweep.py JOBS.json [--workers 6] [--accelerator gpu] [--out sweep.jsonl]

JOBS.json is a list of ``{"key": "syn50", "method": "named_cfe", "params": {...}, "aug": "none|ag1|ag2",
"seed": 0}``; ``key`` and ``aug`` as in ``paper_tables.py`` (augmented splits come from its cache).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run(job: dict, args: argparse.Namespace) -> dict:
    import torch
    from paper_tables import Tables

    from evaluation.metrics import exact_match
    from learners.base import FitContext, build_generator

    torch.set_num_threads(args.threads)
    tables = Tables(argparse.Namespace(budget="full", root=args.root, out=os.devnull, agents=args.agents,
                                       threads=args.threads, accelerator=args.accelerator))
    ds = tables.dataset(job["key"])
    train, test = ds.split("all", 0.2)
    if job.get("aug", "none") != "none":
        train, _ = tables.augmented(job["key"], ds, "all", job["aug"])
    ctx = FitContext.from_world(ds.world, max_len=int((train.sets >= 0).sum(1).max()), seed=job.get("seed", 0),
                                progress=False)
    model = build_generator(job["method"], {"accelerator": args.accelerator, "num_threads": args.threads,
                                            **job["params"]})
    t = time.perf_counter()
    model.fit(train, None, ctx)
    n = min(len(train), 20_000)
    return dict(job, fit_s=round(time.perf_counter() - t, 1), epochs=model.fit_info_["epochs"], train_n=len(train),
                train_acc=float(exact_match(model.predict(train.X[:n]).sets, train.sets[:n]).mean()),
                test_acc=float(exact_match(model.predict(test.X).sets, test.sets).mean()))


def _run(item: tuple[dict, argparse.Namespace]) -> dict:
    return run(*item)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jobs", help="JSON list of jobs")
    p.add_argument("--workers", type=int, default=6, help="jobs fitted at once")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads per job")
    p.add_argument("--accelerator", default="gpu", choices=["cpu", "gpu", "auto"], help="Lightning accelerator")
    p.add_argument("--agents", type=int, default=100_000, help="agents generated per dataset")
    p.add_argument("--root", default="benchmarks/results/runs", help="paper_tables' run root (its _aug cache)")
    p.add_argument("--out", default="benchmarks/results/gpu_sweep.jsonl", help="results, one JSON line per job")
    args = p.parse_args(argv)
    jobs = json.loads(open(args.jobs).read())
    with mp.get_context("spawn").Pool(args.workers) as pool, open(args.out, "a") as out:
        for res in pool.imap_unordered(_run, [(j, args) for j in jobs]):
            print(json.dumps(res), flush=True)
            out.write(json.dumps(res) + "\n")  # appended as each job ends: an interrupted sweep keeps its results


if __name__ == "__main__":
    main()
