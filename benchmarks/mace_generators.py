"""Generators trained on MACE labels of a real data set ("MACE label training data").

    python benchmarks/mace_generators.py [--dataset adult] [--model forest] [--norm one]
                                         [--agents 1500] [--epochs 40]

Labels the model's negatively classified training agents with MACE (MILP backend; resumable
chunks under ``data_cache/mace_labels``), splits the solved agents 80/20 by seed, trains the
named-action and named-CFE generators on which raw features the nearest counterfactual changes,
and reports exact-set accuracy on the held-out agents with ±1.96·SE, the majority-class baseline,
and the amortization factor (MACE seconds per agent / generator seconds per agent, same run).
Writes ``benchmarks/results/mace/generators_<dataset>_<model>_<norm>.json`` and prints markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.warmup import warming_up  # noqa: E402
from data_gen.classifiers import build, negatives  # noqa: E402
from data_gen.mace_labels import label_tabular  # noqa: E402
from data_gen.splits import train_test_split  # noqa: E402
from evaluation.metrics import exact_match, proportion  # noqa: E402
from learners.base import FitContext, build_generator  # noqa: E402
from solvers.mace import MACE  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="adult", help="tabular data set")
    p.add_argument("--model", default="forest", help="model class to explain")
    p.add_argument("--norm", default="one", help="MACE distance norm")
    p.add_argument("--agents", type=int, default=1500, help="negative training agents to label")
    p.add_argument("--epochs", type=int, default=40, help="generator training epochs")
    p.add_argument("--seed", type=int, default=0, help="world, sample and split seed")
    p.add_argument("--jobs", type=int, default=2, help="labelling worker processes")
    p.add_argument("--out", default="benchmarks/results/mace", help="output directory")
    args = p.parse_args(argv)

    b = build(args.dataset, args.model, seed=args.seed)
    neg = negatives(b.world, b.data.X_train)
    rng = np.random.default_rng(args.seed)
    X = neg[np.sort(rng.choice(len(neg), size=min(args.agents, len(neg)), replace=False))]
    work = Path("data_cache/mace_labels") / f"{args.dataset}-{args.model}-{args.norm}-s{args.seed}-n{len(X)}"
    t = time.perf_counter()
    labels = label_tabular(b.world, X, MACE(backend="milp", norm=args.norm), work, n_jobs=args.jobs)
    label_wall = time.perf_counter() - t
    labels.save(work / "labels", meta={"world": b.world.name, "norm": args.norm, "seed": args.seed})
    split_all, vocab = labels.to_split(b.world.schema)
    train_idx, test_idx = train_test_split(split_all.class_ids, 0.2, args.seed)
    train, _ = labels.to_split(b.world.schema, train_idx, vocab)
    test, _ = labels.to_split(b.world.schema, test_idx, vocab)
    ctx = FitContext(n_features=train.X.shape[1], n_actions=len(labels.feature_names),
                     max_len=split_all.sets.shape[1], action_names=labels.action_names, seed=args.seed, progress=False)
    mace_sec = float(np.mean(labels.runtime))
    majority = float(np.mean(test.class_ids == np.bincount(train.class_ids[train.class_ids >= 0]).argmax()))
    rows = {}
    for method in ("named_action", "named_cfe"):
        t = time.perf_counter()
        model = build_generator(method, {"hidden": (256, 256), "max_epochs": args.epochs, "batch_size": 64}).fit(
            train, None, ctx)
        fit_s = time.perf_counter() - t
        with warming_up(f"{method} on 8 agents"):
            model.predict(test.X[:8])
        t = time.perf_counter()
        pred = model.predict(test.X)
        per_agent = (time.perf_counter() - t) / max(len(test), 1)
        acc = proportion(exact_match(pred.sets, test.sets))
        rows[method] = {"accuracy": acc["value"], "ci95": acc["ci95"], "fit_seconds": fit_s, "seconds_per_agent": per_agent,
                        "amortization": mace_sec / per_agent if per_agent > 0 else None}
    result = {"world": b.world.name, "norm": args.norm, "agents": len(X), "summary": labels.summary(),
              "label_wall_seconds": label_wall, "mace_seconds_per_agent": mace_sec,
              "train": len(train), "test": len(test), "distinct_cfes": len(vocab),
              "majority_baseline": majority, "generators": rows, "load_average": os.getloadavg()[0]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"generators_{args.dataset}_{args.model}_{args.norm}.json").write_text(json.dumps(result, indent=1))
    s = labels.summary()
    print(f"## Generators on MACE labels: {b.world.name}, norm {args.norm}\n\n"
          f"{len(X)} negative agents labelled ({s['n_ok']} solved, {s['n_no_recourse']} no recourse) in "
          f"{label_wall:.0f} s wall; MACE {mace_sec:.3f} s/agent; {len(vocab)} distinct changed-feature sets; "
          f"train {len(train)} / test {len(test)}; majority baseline {majority:.3f}.\n\n"
          "| generator | accuracy (±1.96·SE) | train s | µs/agent | amortization vs MACE |\n|---|---|---|---|---|")
    for m, r in rows.items():
        print(f"| {m} | {r['accuracy']:.3f} ± {r['ci95']:.3f} | {r['fit_seconds']:.0f} | "
              f"{r['seconds_per_agent'] * 1e6:.0f} | {r['amortization']:.0f}x |")


if __name__ == "__main__":
    main()
