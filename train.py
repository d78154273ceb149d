"""Train the generators or policies an experiment config names, then evaluate them.

    python train.py [CONFIG] [--no-eval] [--quiet]

With no CONFIG, configs/default.yaml: a 20-feature synthetic world of 50,000 agents labelled by the
exact set-cover solver, the best generator (MCf) beside the no-learning k-NN baseline (about a
minute on 2 cores). A config with a ``tabular`` mapping (configs/german_forest.yaml) is a real-data
experiment: classifier, MACE labels, generators (evaluation/tabular_experiment.py). One that names a
``world`` (configs/sequential_german.yaml) is a sequential experiment: sequencer labels, policies
(evaluation/sequential_experiment.py).

Everything is resumable: rerun the same command after an interruption and finished labels and
models are reused (a model is retrained only when its config or dataset changed).
Exit status: 0 done, 2 a problem with the input (one line on stderr names it), 130 interrupted.
"""

import argparse
import sys
from pathlib import Path

DEFAULT = Path(__file__).with_name("configs") / "default.yaml"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", default=str(DEFAULT), help="experiment YAML (default: %(default)s)")
    p.add_argument("--no-eval", action="store_true", help="train only; run evaluate.py RUN_DIR later")
    p.add_argument("--quiet", action="store_true",
                   help="no progress output (bars on a terminal; elsewhere, a line per epoch and sparse lines)")
    args = p.parse_args(argv)
    from envs.optional import MissingExtraError

    try:
        return _run(args)
    except (ValueError, FileNotFoundError, MissingExtraError) as err:
        print(f"train.py: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("train.py: interrupted; rerun the same command to resume (finished work is kept)", file=sys.stderr)
        return 130


def _run(args) -> int:
    from data_gen.config import read_yaml

    data = read_yaml(args.config)  # a missing or unreadable config fails before the heavy imports below
    from evaluation.sequential_experiment import is_sequential_config
    from evaluation.tabular_experiment import is_tabular_config

    if is_sequential_config(data):
        return _sequential(args)
    if is_tabular_config(data):
        return _tabular(args)
    return _synthetic(args)


def _synthetic(args) -> int:
    from evaluation.config import load_config
    from evaluation.experiment import evaluate_run, train_experiment
    from evaluation.report import headline

    cfg = load_config(args.config)
    run_dir = train_experiment(cfg, progress=not args.quiet)
    print(f"run directory: {run_dir}")
    if (cfg.generators or cfg.policies) and not args.no_eval:
        results = evaluate_run(run_dir)
        print(f"report: {run_dir / 'report.md'}\n")
        print("\n".join(headline(results)))
    _next_steps(run_dir, serve=True)
    return 0


def _tabular(args) -> int:
    from evaluation.tabular_experiment import evaluate_tabular, load_tabular_config, train_tabular

    cfg = load_tabular_config(args.config)
    run_dir = train_tabular(cfg, progress=not args.quiet)
    print(f"run directory: {run_dir}")
    if not args.no_eval:
        evaluate_tabular(run_dir, progress=not args.quiet)
        print(f"report: {run_dir / 'report.md'}")
    _next_steps(run_dir, serve=True)
    return 0


def _sequential(args) -> int:
    from evaluation.sequential_experiment import evaluate_sequential, load_sequential_config, train_sequential

    cfg = load_sequential_config(args.config)
    run_dir = train_sequential(cfg, progress=not args.quiet)
    print(f"run directory: {run_dir}")
    if cfg.policies and not args.no_eval:
        evaluate_sequential(run_dir)
        print(f"report: {run_dir / 'report.md'}")
    _next_steps(run_dir, serve=bool(cfg.policies))
    return 0


def _next_steps(run_dir: Path, serve: bool) -> None:
    steps = [(f"python evaluate.py {run_dir}", "evaluate again (metrics.json, report.md, plots/)")]
    if serve:
        steps.append((f"python serve.py {run_dir}", "serve it over HTTP (API docs at http://127.0.0.1:8000/docs)"))
    steps += [("python train.py configs/german_forest.yaml", "real data: MACE labels, then generators"),
              ("python train.py configs/sequential_german.yaml", "ordered actions: sequencer labels, then policies"),
              ("python -m pytest -q", "the test suite (pip install -e '.[test]' first)")]
    width = max(len(cmd) for cmd, _ in steps)
    print("\nnext:\n" + "\n".join(f"  {cmd.ljust(width)}  # {why}" for cmd, why in steps))


if __name__ == "__main__":
    sys.exit(main())
