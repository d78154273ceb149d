"""Train the generators an experiment config names, then evaluate them.

    python train.py [configs/NAME.yaml] [--no-eval] [--quiet]

With no config, the embedded default (configs/default.yaml: a small synthetic set) is used.
A config that names a ``world`` (configs/sequential_adult.yaml) is a sequential experiment
(learners/sequential_experiment.py); one with a ``tabular`` mapping (configs/adult_forest.yaml) a
real-data experiment: classifier, MACE labels, generators (learners/tabular_experiment.py).
"""

import argparse
import sys
from pathlib import Path

from learners.config import load_config
from learners.experiment import evaluate_run, train_experiment

DEFAULT = Path(__file__).with_name("configs") / "default.yaml"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", default=str(DEFAULT), help="experiment YAML (default: %(default)s)")
    p.add_argument("--no-eval", action="store_true", help="train only; run evaluate.py later")
    p.add_argument("--quiet", action="store_true",
                   help="no progress output (bars on a terminal; elsewhere, a line per epoch and sparse lines)")
    args = p.parse_args(argv)
    try:
        from data_gen.config import read_yaml
        from learners.sequential_experiment import is_sequential_config
        from learners.tabular_experiment import is_tabular_config

        data = read_yaml(args.config)
        if is_sequential_config(data):
            return _sequential(args)
        if is_tabular_config(data):
            return _tabular(args)
        cfg = load_config(args.config)
    except (ValueError, FileNotFoundError) as err:
        print(err, file=sys.stderr)
        return 2
    run_dir = train_experiment(cfg, progress=not args.quiet)
    print(f"run directory: {run_dir}")
    if (cfg.generators or cfg.policies) and not args.no_eval:
        evaluate_run(run_dir)
        print(f"report: {run_dir / 'report.md'}")
    return 0


def _tabular(args) -> int:
    from learners.tabular_experiment import evaluate_tabular, load_tabular_config, train_tabular

    cfg = load_tabular_config(args.config)
    run_dir = train_tabular(cfg, progress=not args.quiet)
    print(f"run directory: {run_dir}")
    if not args.no_eval:
        evaluate_tabular(run_dir, progress=not args.quiet)
        print(f"report: {run_dir / 'report.md'}")
    return 0


def _sequential(args) -> int:
    from learners.sequential_experiment import evaluate_sequential, load_sequential_config, train_sequential

    cfg = load_sequential_config(args.config)
    run_dir = train_sequential(cfg, progress=not args.quiet)
    print(f"run directory: {run_dir}")
    if cfg.policies and not args.no_eval:
        evaluate_sequential(run_dir)
        print(f"report: {run_dir / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
