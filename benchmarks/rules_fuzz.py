"""No served answer breaks a rule: 5,000 fuzzed records per data set through the service (issue 55).

    python benchmarks/rules_fuzz.py [--records 5000] [--datasets adult german] [--model forest]
                                    [--agents 300] [--fallback-records 40] [--runs-dir data_cache/rules_fuzz]

Per data set a run is trained as a user of the bundled configs gets one now (``tabular.rules:
default``: the spec's default rules, ``data_gen/default_rules.py``; MACE labels under them; the
``nearest_cfe`` generator), or reused from ``--runs-dir``. Then ``--records`` random raw records
(``tests/rules_fuzz.py``: every level equally likely, numbers uniform in the observed range, 10% at
a bound) go through ``TabularService.recommend_records`` in batches of 500 with ``n_diverse`` 2 and
a fallback budget of 0 (the generator's answers; a record whose answer the checks refused is
"unknown"), and every served counterfactual (answers and alternatives) is re-checked by the
row-by-row reference (``tests/rules_reference.py``, independent of ``envs.rules``' compiled
checker the service uses) and by the served model. Then ``--fallback-records`` of the records left
unknown are answered by the whole chain (GeCo, then MACE; no budget) and checked the same way.
Last, the same records through the same service with a rule-blind stand-in generator instead
(``tests/tabular_serving_run.py``: the nearest accepted training row made plausible for the
schema's mutability only), so that the service's own check, not the generator, is what is measured:
its refusals per rule, and 0 violations. Writes ``benchmarks/results/rules_fuzz.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from evaluation.tabular_experiment import load_tabular_config, train_tabular  # noqa: E402
from serving.tabular import TabularService  # noqa: E402
from tests.rules_fuzz import check_answers, fuzz_records  # noqa: E402

BATCH = 500


def train(dataset: str, args: argparse.Namespace) -> Path:
    name = f"fuzz_{dataset}_{args.model}_{args.agents}"
    run_dir = Path(args.runs_dir) / name
    if (run_dir / "models" / "nearest_cfe" / "fit.json").exists():
        return run_dir
    cfg = {"name": name, "output_dir": str(args.runs_dir),
           "tabular": {"dataset": dataset, "model": args.model, "seed": 0, "agents": args.agents, "geco_agents": 0,
                       "mace": {"time_limit": 10}, "compute": {"backend": "local", "n_workers": 2}, "rules": "default"},
           "generators": [{"method": "nearest_cfe"}]}
    path = Path(args.runs_dir) / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg))
    t = time.perf_counter()
    out = train_tabular(load_tabular_config(path), progress=False)
    print(f"{dataset}: trained {name} in {time.perf_counter() - t:.0f} s", flush=True)
    return out


def _plain(c: dict) -> dict:
    return {k: (dict(v) if isinstance(v, Counter) else v) for k, v in c.items()}


def fuzz(dataset: str, args: argparse.Namespace) -> dict:
    run_dir = train(dataset, args)
    svc = TabularService(run_dir, fallback_budget_s=0.0)
    rules = svc.world.rules
    try:
        records = fuzz_records(svc.codec, args.records, seed=args.seed)
        t = time.perf_counter()
        rows = []
        for s in range(0, len(records), BATCH):
            rows += svc.recommend_records(records[s: s + BATCH], n_diverse=2)
        seconds = time.perf_counter() - t
        got = check_answers(svc, rules, records, rows)
        info = svc.describe()
    finally:
        svc.close()
    left = [r for r, row in zip(records, rows, strict=True) if row["status"] == "unknown"][: args.fallback_records]
    chain = TabularService(run_dir, fallback_budget_s=None)
    try:
        t = time.perf_counter()
        again = chain.recommend_records(left, n_diverse=2) if left else []
        chain_seconds = time.perf_counter() - t
        later = check_answers(chain, rules, left, again)
    finally:
        chain.close()
    return {"dataset": dataset, "run": run_dir.name, "model": args.model, "agents": args.agents,
            "rules": info["rules"], "served": _plain(got), "seconds": seconds,
            "rule_refusals": info["rule_refusals"], "counters": info["counters"],
            "fallback": {**_plain(later), "seconds": chain_seconds}, "stand_in": stand_in(run_dir, records),
            "load_average": os.getloadavg()[0],
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def stand_in(run_dir: Path, records: list[dict]) -> dict:
    """The records through the run's service with the rule-blind stand-in generator (fallback budget 0,
    no GeCo): the service's check alone keeps the rules."""
    from types import SimpleNamespace

    from evaluation.tabular_experiment import load_tabular_run
    from tests.tabular_serving_run import NearestAccepted

    run = load_tabular_run(run_dir)
    X_train = run.data().X_train
    fake = SimpleNamespace(world=run.world, config=run.config, mace_params=run.mace_params, metrics=None,
                           generators={"stand_in": NearestAccepted(run.world, X_train)})
    svc = TabularService(run_dir, "stand_in", 0.0, run=fake, geco_data=X_train[:200])
    svc.geco = None  # the records left unknown queue MACE jobs only, dropped at close
    try:
        t = time.perf_counter()
        rows = []
        for s in range(0, len(records), BATCH):
            rows += svc.recommend_records(records[s: s + BATCH], n_diverse=2)
        seconds = time.perf_counter() - t
        got = check_answers(svc, run.world.rules, records, rows)
        info = svc.describe()
    finally:
        svc.close()
    return {**_plain(got), "seconds": seconds, "rule_refusals": info["rule_refusals"],
            "generator_invalid": info["counters"]["generator_invalid"]}


def table(cells: list[dict]) -> str:
    lines = ["# Fuzzed records through the service under the default rules (issue 55)", "",
             "Random raw records through `TabularService.recommend_records` (batches of 500, n_diverse 2, fallback "
             "budget 0: the generator's answers), every served counterfactual re-checked by the row-by-row "
             "reference (tests/rules_reference.py) and the served model; then records left unknown through the "
             "whole chain (GeCo, MACE; no budget). `benchmarks/rules_fuzz.py`.", "",
             "| data | records | already accepted | answered (generator) | unknown | counterfactuals checked "
             "(with alternatives) | rule violations | rejected by the model | generator answers refused by a rule "
             "| s per record |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        s = c["served"]
        lines.append(f"| {c['dataset']} | {s['records']} | {s['status'].get('already_positive', 0)} | "
                     f"{s['status'].get('ok', 0)} | {s['status'].get('unknown', 0)} | {s['checked']} | "
                     f"{len(s['violations'])} | {s['rejected_by_model']} | {sum(c['rule_refusals'].values())} | "
                     f"{c['seconds'] / max(s['records'], 1) * 1e3:.2f} ms |")
    lines += ["", "Through the fallback chain (records the generator left unknown):", "",
              "| data | records | ok by method | no recourse | unknown | counterfactuals checked | rule violations | "
              "rejected by the model | seconds |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        f = c["fallback"]
        by = ", ".join(f"{k} {v}" for k, v in sorted(f["method"].items()))
        lines.append(f"| {c['dataset']} | {f['records']} | {by or '-'} | {f['status'].get('no_recourse', 0)} | "
                     f"{f['status'].get('unknown', 0)} | {f['checked']} | {len(f['violations'])} | "
                     f"{f['rejected_by_model']} | {f['seconds']:.1f} |")
    lines += ["", "The same records with a rule-blind stand-in generator (the service's check alone keeps the rules):",
              "", "| data | answered | unknown | counterfactuals checked | rule violations | rejected by the model | "
              "answers refused by a rule | refused by the checks in all |", "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        f = c["stand_in"]
        lines.append(f"| {c['dataset']} | {f['status'].get('ok', 0)} | {f['status'].get('unknown', 0)} | "
                     f"{f['checked']} | {len(f['violations'])} | {f['rejected_by_model']} | "
                     f"{sum(f['rule_refusals'].values())} | {f['generator_invalid']} |")
    lines += [""]
    for c in cells:
        for who, refusals in (("trained generator", c["rule_refusals"]), ("stand-in", c["stand_in"]["rule_refusals"])):
            top = sorted(refusals.items(), key=lambda kv: -kv[1])
            lines.append(f"- {c['dataset']} ({c['run']}), {who}: answers refused per rule: "
                         + ("; ".join(f"`{k}` {v}" for k, v in top) or "none") + ".")
        lines.append(f"- {c['dataset']}: load average {c['load_average']:.1f}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=5000)
    p.add_argument("--datasets", nargs="+", default=["adult", "german"])
    p.add_argument("--model", default="forest")
    p.add_argument("--agents", type=int, default=300, help="MACE-labelled agents of each trained run")
    p.add_argument("--fallback-records", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs-dir", default=str(ROOT / "data_cache" / "rules_fuzz"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "rules_fuzz"))
    args = p.parse_args(argv)
    cells = []
    for dataset in args.datasets:
        c = fuzz(dataset, args)
        cells.append(c)
        s = c["served"]
        print(f"{dataset}: {s['checked']} counterfactuals checked, {len(s['violations'])} rule violations, "
              f"{s['rejected_by_model']} rejected by the model; fallback {len(c['fallback']['violations'])}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(cells, indent=1, default=str))
    md = table(cells)
    out.with_suffix(".md").write_text(md)
    print(md)
    bad = sum(len(c[k]["violations"]) + c[k]["rejected_by_model"] for c in cells for k in ("served", "fallback", "stand_in"))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
