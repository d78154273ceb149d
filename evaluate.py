"""Evaluate a trained run on its held-out split: metrics.json, report.md and plots.

    python evaluate.py runs/NAME [--no-plots] [--filters all >10]
    python evaluate.py --audit runs/NAME --groups sex race [--sample 500] [--seed 0]

``--audit`` (real-data tabular runs): who bears the cost of recourse, with certified bounds, over the
rejected agents of the classifier's test split, by group (evaluation/audit.py): audit.md,
audit.json and plots in the run directory.

Works on every kind of run train.py writes (synthetic, real-data tabular, sequential); it reads the
run's config.yaml to tell which. Exit status: 0 done, 2 a problem with the input (one line on
stderr names it: a missing or unfinished run directory, an untrained model), 130 interrupted.
"""

import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", nargs="?", help="a run directory written by train.py")
    p.add_argument("--audit", metavar="RUN_DIR", default=None,
                   help="recourse audit of a tabular run (instead of the evaluation): audit.md, audit.json, plots")
    p.add_argument("--groups", nargs="+", default=None, help="audit: group attributes, e.g. sex race")
    p.add_argument("--sample", type=int, default=None,
                   help="audit: a seeded sample of this many rejected test agents (default: all)")
    p.add_argument("--seed", type=int, default=0, help="audit: seed of the sample and the bootstrap")
    p.add_argument("--tol", type=float, default=0.01,
                   help="audit: MACE runs where the interval's relative width exceeds this (default 0.01)")
    p.add_argument("--time-limit", type=float, default=None, help="audit: MACE seconds per agent (default: the run's)")
    p.add_argument("--mace-rel-tol", type=float, default=None,
                   help="audit: MACE's certificate tolerance (default: the run's; --tol suffices for the audit)")
    p.add_argument("--workers", type=int, default=None, help="audit: MACE processes (default: the run's compute)")
    p.add_argument("--chunk-size", type=int, default=25, help="audit: agents per resumable MACE chunk")
    p.add_argument("--generator", default=None,
                   help="audit: the run's generator giving upper bounds (default: the served one; none: no generator)")
    p.add_argument("--no-plots", action="store_true", help="synthetic runs: skip the PNG plots")
    p.add_argument("--filters", nargs="+", default=None,
                   help="synthetic runs: evaluate only these CFE-frequency filters of the run (default: all)")
    args = p.parse_args(argv)
    from envs.optional import MissingExtraError

    try:
        from pathlib import Path

        if args.audit is not None or args.groups is not None:
            return _audit(args)
        if args.run_dir is None:
            raise ValueError("name a run directory (python evaluate.py runs/NAME, or --audit runs/NAME --groups ...)")

        cfg_path = Path(args.run_dir) / "config.yaml"
        if not cfg_path.exists():  # before the heavy imports below: a mistyped path answers at once
            raise FileNotFoundError(f"run: {args.run_dir} has no config.yaml (not a run directory)")
        import yaml

        from evaluation.experiment import evaluate_run
        from evaluation.sequential_experiment import evaluate_sequential, is_sequential_config
        from evaluation.tabular_experiment import evaluate_tabular, is_tabular_config

        data = yaml.safe_load(cfg_path.read_text())
        if is_sequential_config(data):
            evaluate_sequential(args.run_dir)
            return 0
        if is_tabular_config(data):
            evaluate_tabular(args.run_dir)
            print(f"report: {Path(args.run_dir) / 'report.md'}")
            return 0
        evaluate_run(args.run_dir, plots=not args.no_plots, filters=args.filters)
    except (ValueError, FileNotFoundError, MissingExtraError) as err:
        print(f"evaluate.py: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("evaluate.py: interrupted", file=sys.stderr)
        return 130
    return 0


def _audit(args: argparse.Namespace) -> int:
    """The --audit branch: checks the arguments, runs evaluation.audit.audit_run, prints the headline."""
    from pathlib import Path

    from evaluation.tabular_experiment import is_tabular_run

    run_dir = args.audit or args.run_dir
    if run_dir is None or args.run_dir is not None and args.audit is not None:
        raise ValueError("--audit: name one run directory (python evaluate.py --audit runs/NAME --groups sex race)")
    if not args.groups:
        raise ValueError("--audit: name the group attributes with --groups (e.g. --groups sex race)")
    if not (Path(run_dir) / "config.yaml").exists():
        raise FileNotFoundError(f"--audit: {run_dir} has no config.yaml (not a run directory)")
    if not is_tabular_run(run_dir):
        raise ValueError(f"--audit: {run_dir} is not a real-data tabular run (audits need a tabular world)")
    for name, v in (("--tol", args.tol), ("--mace-rel-tol", args.mace_rel_tol)):
        if v is not None and not 0 <= v < 1:
            raise ValueError(f"{name}: must be in [0, 1), got {v}")
    from evaluation.audit import audit_run

    out = audit_run(run_dir, args.groups, sample=args.sample, seed=args.seed, tol=args.tol,
                    time_limit=args.time_limit, mace_rel_tol=args.mace_rel_tol, n_workers=args.workers, chunk_size=args.chunk_size,
                    generator=args.generator)
    for attr, a in out["attributes"].items():
        for g, c in a["compared_to_reference"].items():
            print(f"{attr}: {g} vs {a['reference']}: mean-cost ratio CI [{c['ratio_ci'][0]:.3f}, "
                  f"{c['ratio_ci'][1]:.3f}] ({c['conclusion']})")
    print(f"audit: {Path(run_dir) / 'audit.md'} ({out['population']['audited']} agents, "
          f"{out['seconds']['total_this_call']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
