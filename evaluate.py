"""Evaluate a trained run on its held-out split: metrics.json, report.md and plots.

    python evaluate.py runs/NAME [--no-plots] [--filters all >10]

Works on every kind of run train.py writes (synthetic, real-data tabular, sequential); it reads the
run's config.yaml to tell which. Exit status: 0 done, 2 a problem with the input (one line on
stderr names it: a missing or unfinished run directory, an untrained model), 130 interrupted.
"""

import argparse
import sys

from learners.experiment import evaluate_run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a run directory written by train.py")
    p.add_argument("--no-plots", action="store_true", help="synthetic runs: skip the PNG plots")
    p.add_argument("--filters", nargs="+", default=None,
                   help="synthetic runs: evaluate only these CFE-frequency filters of the run (default: all)")
    args = p.parse_args(argv)
    from envs.optional import MissingExtraError

    try:
        from pathlib import Path

        import yaml

        from learners.sequential_experiment import evaluate_sequential, is_sequential_config
        from learners.tabular_experiment import evaluate_tabular, is_tabular_config

        cfg_path = Path(args.run_dir) / "config.yaml"
        data = yaml.safe_load(cfg_path.read_text()) if cfg_path.exists() else None
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


if __name__ == "__main__":
    sys.exit(main())
