"""Do the saved black-box generators still give the same answers, bit for bit? For a change meant to be a speed-up
only (issue 56): save the answers before it, check them after.

    python benchmarks/same_answers.py --save before            # the code before the change
    python benchmarks/same_answers.py --check before           # after it: SAME / DIFF per fit, budget and route

Each fit (``--fits``: cell:method under ``--generators``, as ``blackbox_generators.py`` saves them) answers its
cell's held-out agents at each budget as one batch, and with ``--alone`` also one agent at a time against a model
with a 5 ms wait per call (the route a served request takes, where ``budget_search`` guesses round two's moves on
its helper thread while the call waits). The answers, each agent's rows and calls, and the model's counts are kept
in ``<--out>/<name>.npz``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.blackbox_generators import add_label_arguments, cell_labels, with_cell_defaults  # noqa: E402
from envs.black_box import BlackBoxModel, Budget  # noqa: E402
from learners.tabular.base import TabularGenerator  # noqa: E402

FITS = "german/mlp:proposer_surrogate,german/forest:proposer,credit/forest:proposer"


def answers(fits: list[str], budgets: list[str], generators: Path, alone: bool, args: argparse.Namespace
            ) -> dict[str, np.ndarray]:
    """Per fit, budget and route, the answers (and ``:counts``: rows, calls and the model's own counts)."""
    out: dict[str, np.ndarray] = {}
    for fit in fits:
        cell, method = fit.split(":")
        c, _, _ = cell_labels(cell, args)
        world, X = c.build.world, c.test
        gen = TabularGenerator.load(generators / cell.replace("/", "_") / method)
        for size in budgets:
            budget = Budget(*map(int, size.split("x")))
            model = BlackBoxModel(world.model)
            rec = gen.recommend_within(replace(world, model=model), X, budget)
            key = f"{fit}:{size}"
            out[key] = rec.CF
            out[key + ":counts"] = np.concatenate([np.ravel(rec.rows), np.ravel(rec.calls), [model.calls, model.rows]])
            if alone and budget.calls > 1:
                slow = replace(world, model=BlackBoxModel(world.model, latency_s=0.005))
                out[key + ":alone"] = np.concatenate([gen.recommend_within(slow, x[None], budget).CF for x in X])
            print(f"{key}: {int(np.sum(rec.found))} / {len(X)} answered", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_label_arguments(p)
    p.add_argument("--save", help="write the answers under this name")
    p.add_argument("--check", help="compare the answers with those saved under this name")
    p.add_argument("--fits", default=FITS, help="cell:method, comma-separated (saved generators)")
    p.add_argument("--budgets", default="2x256,8x2000", help="calls x rows per answer, comma-separated")
    p.add_argument("--generators", default="data_cache/blackbox_generators", help="where the generators are saved")
    p.add_argument("--out", default="data_cache/same_answers", help="where the answers are kept")
    p.add_argument("--no-alone", dest="alone", action="store_false", help="skip the one-agent-at-a-time route")
    args = with_cell_defaults(p.parse_args())
    if not args.save and not args.check:
        p.error("--save NAME or --check NAME")
    got = answers(args.fits.split(","), args.budgets.split(","), Path(args.generators), args.alone, args)
    out = Path(args.out)
    if args.save:
        out.mkdir(parents=True, exist_ok=True)
        np.savez(out / f"{args.save}.npz", **got)
    if args.check:
        ref = np.load(out / f"{args.check}.npz")
        differ = [k for k in got if k not in ref or not np.array_equal(ref[k], got[k], equal_nan=True)]
        for k in got:
            print(("DIFF " if k in differ else "SAME ") + k)
        print("every answer the same, bit for bit" if not differ else f"{len(differ)} of {len(got)} differ")
        sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
