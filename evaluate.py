"""Evaluate a trained run on its held-out split: metrics.json, report.md and plots.

    python evaluate.py runs/NAME [--no-plots]
"""

import argparse
import sys

from learners.experiment import evaluate_run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a run directory written by train.py")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--filters", nargs="+", default=None, help="evaluate only these filters of the run")
    args = p.parse_args(argv)
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
    except (ValueError, FileNotFoundError) as err:
        print(err, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
