"""The worked recourse audits of docs/audit.md (issue 39): train a small tabular run per cell (when
missing), audit it with ``evaluate.py --audit`` and copy audit.{md,json} and the plots to
``benchmarks/results/audit/<cell>/``.

    python benchmarks/audit.py [--cells adult_forest adult_lr compas_mlp credit_forest]
                               [--sample N] [--workers 2] [--runs runs]

Cells (data set, model, group attributes): adult_forest and adult_lr by sex and race, compas_mlp by
Race and sex, credit_forest by sex (isMale). Each run labels 120 rejected agents with MACE (time limit 10 s
per agent) to train its generators; the audit itself covers the classifier's rejected test agents
(all, or a seeded sample of ``--sample``). Everything resumes: trained runs are reused and the
audit's MACE chunks are kept under ``<run>/audit/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "audit"
CELLS = {"adult_forest": ["sex", "race"], "adult_lr": ["sex", "race"], "compas_mlp": ["Race", "sex"],
         "credit_forest": ["sex"]}
SAMPLES: dict[str, int] = {}  # cell -> a seeded sample size where a full audit does not fit (docs/audit.md: none)


def run_config(cell: str, runs: str) -> dict:
    """The small run a cell audits: 120 MACE-labelled agents, the two tabular generators."""
    dataset, model = cell.split("_")
    return {"name": f"audit_{cell}", "output_dir": runs,
            "tabular": {"dataset": dataset, "model": model, "seed": 0, "agents": 120, "test_fraction": 0.2,
                        "mace": {"backend": "milp", "norm": "one", "rel_tol": 0.001, "time_limit": 10},
                        "compute": {"backend": "local", "n_workers": 2}, "chunk_size": 20, "geco_agents": 0},
            "generators": [{"method": "named_cfe"}, {"method": "nearest_cfe"}]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", nargs="+", default=list(CELLS), choices=list(CELLS), help="cells to audit")
    p.add_argument("--sample", type=int, default=None,
                   help="seeded sample of rejected test agents (default: all)")
    p.add_argument("--workers", type=int, default=2, help="MACE processes per audit")
    p.add_argument("--runs", default="runs", help="where the runs are trained")
    args = p.parse_args(argv)
    for cell in args.cells:
        cfg = run_config(cell, args.runs)
        run = Path(args.runs) / cfg["name"]
        if not (run / "models").exists():
            path = Path(args.runs) / f"{cfg['name']}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            t0 = time.perf_counter()
            subprocess.run([sys.executable, str(ROOT / "train.py"), str(path), "--no-eval", "--quiet"], check=True)
            print(f"{cell}: trained in {time.perf_counter() - t0:.1f} s")
        cmd = [sys.executable, str(ROOT / "evaluate.py"), "--audit", str(run), "--groups", *CELLS[cell],
               "--workers", str(args.workers)]
        sample = args.sample or SAMPLES.get(cell)
        if sample:
            cmd += ["--sample", str(sample)]
        subprocess.run(cmd, check=True)
        dest = OUT / cell
        dest.mkdir(parents=True, exist_ok=True)
        for f in [run / "audit.md", run / "audit.json", *run.glob("audit_*.png")]:
            shutil.copy(f, dest / f.name)
        m = json.loads((run / "audit.json").read_text())
        print(json.dumps({"cell": cell, "audited": m["population"]["audited"], "seconds": m["seconds"],
                          "certified_share_1pct": m["certified_share_1pct"], "routes": m["routes"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
