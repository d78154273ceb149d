"""Digests of the tabular generators' answers: a bit-identity check for refactors (issue 53).

    python benchmarks/tabular_answers_digest.py --out /tmp/digest_before.json      # before a change
    python benchmarks/tabular_answers_digest.py --out /tmp/digest_after.json       # after it
    python benchmarks/tabular_answers_digest.py --cells german/forest,adult/mlp --compare /tmp/digest_before.json

Per cell (data set x model via ``data_gen.classifiers.build``, seed 0): a small training pool (the
rejected training rows, then agents drawn around them, as ``benchmarks/tabular_generators.py`` draws
them) labelled by MACE (MILP, l1, rel_tol 1e-2) in resumable chunks under
``data_cache/tabular_answers_digest/<cell>-<hash>/`` (a rerun reuses them), then ``change_value``,
``change_value`` with ``use_network=False``, ``named_cfe`` and ``nearest_cfe`` fitted on those labels,
each answering ~40 held-out rejected test rows batched. The SHA-256 of each method's answers (the CF
rows' float64 bytes and the found mask) is printed and written as JSON. Two runs agree bit for bit
when their digests are equal; ``--compare`` says which differ.

Cheap by design (120 labels per cell, ~40 agents): a few minutes on two cores, most of it the first
run's labels. Not a quality measure: the generators are trained on far fewer labels than in a run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox import sample  # noqa: E402
from benchmarks.tabular_generators import TRAIN_MACE, _key, training_labels  # noqa: E402
from data_gen.classifiers import build  # noqa: E402
from data_gen.perturbed_agents import PerturbParams  # noqa: E402
from learners.tabular import TabularLabels, build_tabular_generator  # noqa: E402

CELLS = [f"{d}/{m}" for d in ("adult", "german", "compas", "credit") for m in ("forest", "mlp")]
METHODS: dict[str, tuple[str, dict]] = {
    "change_value": ("change_value", {}),
    "change_value_no_net": ("change_value", {"use_network": False}),
    "named_cfe": ("named_cfe", {}),
    "nearest_cfe": ("nearest_cfe", {}),
}


def answers_digest(CF: np.ndarray, found: np.ndarray) -> str:
    """SHA-256 of the answers' bytes (float64, C order; NaN rows included) and the found mask."""
    h = hashlib.sha256(np.ascontiguousarray(CF, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(found, dtype=bool).tobytes())
    return h.hexdigest()


def digest_cell(cell: str, args: argparse.Namespace) -> dict:
    dataset, model = cell.split("/")
    t0 = time.perf_counter()
    b = build(dataset, model, seed=args.seed)
    world = b.world
    perturb = PerturbParams()
    cache = Path(args.cache) / (f"{dataset}-{model}-" + _key(
        seed=args.seed, n=args.labels, perturb=perturb, train_mace=TRAIN_MACE, world=world.model.to_dict()))
    train, _, _ = training_labels(world, b.data.X_train, args.labels, args.seed, perturb, cache, jobs=args.jobs,
                                  progress=not args.quiet)
    rows = np.flatnonzero(train.ok)
    labels = TabularLabels(train.X[rows], train.cf[rows], train.distance[rows])
    test = sample(world, b.data.X_test, args.test_agents, args.seed)
    out: dict = {"labels": int(len(train.X)), "solved": int(len(rows)), "test_agents": int(len(test)),
                 "methods": {}}
    for method, (name, params) in METHODS.items():
        gen = build_tabular_generator(name, params).fit(world, labels, seed=args.seed)
        rec = gen.recommend(world, test)
        out["methods"][method] = {"sha256": answers_digest(rec.CF, rec.found), "found": int(np.sum(rec.found))}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"[{cell}] " + "  ".join(f"{m} {v['sha256'][:12]} ({v['found']}/{len(test)})"
                                   for m, v in out["methods"].items()) + f"  {out['seconds']} s", flush=True)
    return out


def compare(a: dict, b: dict) -> list[str]:
    """Cells and methods whose digests differ (only those present in both)."""
    diff = []
    for cell in sorted(set(a) & set(b)):
        for m in sorted(set(a[cell]["methods"]) & set(b[cell]["methods"])):
            if a[cell]["methods"][m]["sha256"] != b[cell]["methods"][m]["sha256"]:
                diff.append(f"{cell} {m}")
    return diff


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", default=",".join(CELLS), help="comma-separated dataset/model cells")
    p.add_argument("--labels", type=int, default=120, help="MACE-labelled training agents per cell")
    p.add_argument("--test-agents", type=int, default=40, help="held-out rejected test rows per cell (at most)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2, help="MACE labelling worker processes")
    p.add_argument("--cache", default="data_cache/tabular_answers_digest", help="label chunks (git-ignored)")
    p.add_argument("--out", default="", help="write the digests here as JSON")
    p.add_argument("--compare", default="", help="a JSON of an earlier run: exit 1 where a digest differs")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    cells = [c for c in args.cells.split(",") if c]
    unknown = [c for c in cells if c not in CELLS]
    if unknown:
        raise SystemExit(f"--cells: unknown {unknown}; known: {CELLS}")
    result = {cell: digest_cell(cell, args) for cell in cells}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True))
    if args.compare:
        diff = compare(json.loads(Path(args.compare).read_text()), result)
        print("digests: " + ("all equal" if not diff else "DIFFER: " + ", ".join(diff)), flush=True)
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
