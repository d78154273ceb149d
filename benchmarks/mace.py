"""MACE on real data: time per explanation, distance and certificate, z3 against MILP in one run.

    python benchmarks/mace.py [--datasets adult credit] [--models tree forest lr mlp]
                              [--norms zero one infty] [--agents 10] [--z3-agents 3]
                              [--z3-timeout 120] [--rel-tol 1e-3] [--epsilon 1e-7]
    python benchmarks/mace.py --check-certificates [--agents 15] [--z3-agents 3] [--norms one]
    python benchmarks/mace.py --audit [--agents 10] [--seeds 0 1] [--jobs 2]
    python benchmarks/mace.py --geco [--agents 50] [--models tree forest mlp] [--tag current]
    python benchmarks/mace.py --before-after [--agents 5] [--norms one] [--before <git revision>]
    python benchmarks/mace.py --rules [--agents 20] [--datasets adult german] [--models tree forest lr mlp]
    python benchmarks/mace.py --rules --geco [--agents 20] [--datasets adult german] [--jobs 2]

For every data set x model x norm, both backends explain the same seeded sample of negatively
classified test agents: the MILP backend all ``--agents`` of them, z3 (Algorithm 1, far slower)
the first ``--z3-agents`` under a per-explanation time limit. Each cell is written to
``benchmarks/results/mace/cells/*.json`` as it finishes (a rerun skips finished cells), then
the markdown table ``benchmarks/results/mace/mace.md`` (+ ``.json``) is rebuilt from all cells.
Coverage counts verified counterfactuals (accepted by the real scikit-learn model, refitted with
the same seed and checked equal to the white box, with every constraint held) among agents that
have one; "gap <= 1%" is the share of answers whose relative gap (d - delta_min) / d is at most 1%;
"agree" is the largest |d_z3 - d_milp| over agents both backends certified.

``--check-certificates`` checks what the flag promises: per data set x model x norm it explains
``--agents`` agents with the defaults (MILP, and z3 on the first ``--z3-agents``) and with the
reference MACE(epsilon=1e-7, rel_tol=0), and counts the answers flagged optimal whose distance is
more than 1% above the reference's (target: none), and any bound above the other's answer.
Results: ``benchmarks/results/mace/certificates.{md,json}``.

``--audit`` (issue 34) checks the certificates against every search the project has: per data set
(Adult, German, COMPAS, Credit) x model x norm and MILP seed, GeCo, MD-PSO and a local search around
MACE's answer look for valid points (accepted by the refitted sklearn model, every constraint held)
below delta_min; an answer flagged optimal with one is unsound. Cells run in ``--jobs`` processes and
are written to ``benchmarks/results/mace/audit/cells/`` as they finish (a rerun resumes); the table is
``benchmarks/results/mace/audit.{md,json}``.

``--geco`` measures GeCo's share of agents within 1% of MACE's certified l1 distance per data set x
model (``geco_<tag>.{md,json}``); ``--before-after`` times MACE at an earlier git revision of
``solvers/mace`` and now, alternating per agent in one run (``before_after_issue34.{md,json}``).

``--rules`` (issue 55) times MACE with and without the world's rules (GeCo's Appendix A.1 program in the
rule language, ``benchmarks/mace_rules.py``) on the same agents, and counts the share certified under them
(``rules.{md,json}``; norms default to one, data sets to Adult and German). ``--rules --geco``: GeCo's
share within 1% of MACE's certified l1 distance, both under those rules (``benchmarks/mace_geco_rules.py``;
``geco_rules.{md,json}``).
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


from benchmarks.blackbox import save  # noqa: E402
from benchmarks.mace_audit import AUDIT_DATASETS, run_audit  # noqa: E402
from benchmarks.mace_common import NORM_INDEX, _load_revision, fmt, sample  # noqa: E402
from benchmarks.mace_geco_rules import run_rules_geco  # noqa: E402
from benchmarks.mace_rules import run_rules  # noqa: E402
from benchmarks.warmup import warming_up  # noqa: E402
from envs.models import SklearnOracle  # noqa: E402
from solvers.mace import MACE  # noqa: E402
from solvers.mace.distance import distance  # noqa: E402

# MACE's own mean seconds per explanation at epsilon = 1e-3 (paper App. C, Table 6), (l0, l1, linf).
PAPER_SECONDS = {
    ("adult", "tree"): (17.59, 9.58, 10.43), ("adult", "forest"): (69.19, 55.79, 52.31),
    ("adult", "lr"): (2.22, 3.55, 5.15), ("adult", "mlp"): (4187, 34101, 7094),
    ("credit", "tree"): (15.84, 7.55, 4.44), ("credit", "forest"): (57.29, 40.75, 26.21),
    ("credit", "lr"): (0.87, 10.57, 6.11), ("credit", "mlp"): (1703, 3304, 8689),
    ("compas", "tree"): (7.07, 5.72, 4.99), ("compas", "forest"): (15.05, 10.75, 8.53),
    ("compas", "lr"): (0.52, 0.31, 0.54), ("compas", "mlp"): (79, 180, 122),
}
REF_EPSILON = 1e-7  # the reference answers of --check-certificates (with rel_tol = 0)




def explain(solver: MACE, world, X: np.ndarray, norm: str, oracle: SklearnOracle) -> list[dict]:
    """One record per agent: seconds, status, distance (re-measured in numpy), bound, gap, verified."""
    out = []
    if len(X):
        with warming_up(f"MACE ({solver.backend}) on one agent"):
            solver.solve(world, X[0])
    for x in X:
        t = time.perf_counter()
        r = solver.solve(world, x)[0]
        sec = time.perf_counter() - t
        rec = {"seconds": sec, "status": r.status, "distance": None, "delta_min": r.extra.get("delta_min"),
               "gap": r.extra.get("gap"), "verified": False, "optimal": r.optimal, "calls": r.extra.get("sat_calls")}
        if r.status == "ok":
            cf = np.asarray(r.extra["counterfactual"], float)
            rec["distance"] = float(distance(world.schema, x, cf[None], norm)[0])
            rec["verified"] = bool(oracle(cf[None])[0]) and not world.schema.mutability_violations(x, cf)[0]
        out.append(rec)
    return out


def summarize(recs: list[dict]) -> dict:
    sec = np.array([r["seconds"] for r in recs]) if recs else np.zeros(0)
    solved = [r for r in recs if r["status"] == "ok"]
    gaps = [r["gap"] for r in solved if r.get("gap") is not None]
    return {
        "n": len(recs), "solved": len(solved), "verified": sum(r["verified"] for r in solved),
        "certified": sum(bool(r["optimal"]) for r in solved),
        "gap_within_1pct": sum(g <= 0.01 for g in gaps), "gap_max": max(gaps) if gaps else None,
        "no_recourse": sum(r["status"] == "no_recourse" for r in recs),
        "unknown": sum(r["status"] == "unknown" for r in recs),
        "seconds_mean": float(sec.mean()) if len(sec) else None, "seconds_max": float(sec.max()) if len(sec) else None,
        "distance_mean": float(np.mean([r["distance"] for r in solved])) if solved else None,
    }


def certified_gaps(milp: list[dict], z3: list[dict]) -> list[float]:
    """|d_z3 - d_milp| over agents both backends solved with an optimality certificate."""
    return [abs(a["distance"] - m["distance"]) for a, m in zip(z3, milp, strict=False)
            if a["status"] == "ok" and m["status"] == "ok" and a["optimal"] and m["optimal"]]


def run_cell(dataset: str, model: str, norm: str, args: argparse.Namespace, cell_path: Path) -> dict:
    b, X, oracle = sample(dataset, model, args)
    tol = {"rel_tol": args.rel_tol, "epsilon": args.epsilon, "oracle": oracle}
    milp = explain(MACE(backend="milp", norm=norm, time_limit=args.milp_timeout, **tol), b.world, X, norm, oracle)
    z3 = explain(MACE(backend="z3", norm=norm, time_limit=args.z3_timeout, **tol),
                 b.world, X[: args.z3_agents], norm, oracle)
    gaps = certified_gaps(milp, z3)
    cell = {
        "dataset": dataset, "model": model, "norm": norm, "model_kwargs": json.loads(args.model_kwargs),
        "leaves": b.metrics.get("leaves_per_tree"), "rel_tol": args.rel_tol, "epsilon": args.epsilon,
        "seed": args.seed, "test_accuracy": b.metrics.get("test_accuracy"), "encoded_columns": int(X.shape[1]),
        "milp": summarize(milp), "z3": summarize(z3), "agree_max_gap": max(gaps) if gaps else None,
        "records": {"milp": milp, "z3": z3}, "load_average": os.getloadavg()[0],
        "paper_seconds": PAPER_SECONDS.get((dataset, model), (None,) * 3)[NORM_INDEX[norm]],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return save(cell, cell_path)


def check_cell(dataset: str, model: str, norm: str, args: argparse.Namespace) -> dict:
    """Default answers (MILP on every agent, z3 on the first few) against the reference epsilon = 1e-7,
    rel_tol = 0: flagged optimal yet more than 1% above the reference, and bounds above an answer."""
    b, X, oracle = sample(dataset, model, args)
    ref_solver = MACE(norm=norm, rel_tol=0.0, epsilon=REF_EPSILON, time_limit=args.milp_timeout, oracle=oracle)
    solvers = {"milp": MACE(norm=norm, rel_tol=args.rel_tol, epsilon=args.epsilon, time_limit=args.milp_timeout,
                            oracle=oracle),
               "z3": MACE(backend="z3", norm=norm, rel_tol=args.rel_tol, epsilon=args.epsilon,
                          time_limit=args.z3_timeout, oracle=oracle)}
    records = []
    with warming_up("MACE (reference, milp" + (", z3" if args.z3_agents else "") + ") on one agent"):
        for name, solver in {"ref": ref_solver, **solvers}.items():
            if name != "z3" or args.z3_agents:
                solver.solve(b.world, X[0])
    for i, x in enumerate(X):
        t = time.perf_counter()
        ref = ref_solver.solve(b.world, x)[0]
        rec = {"ref": {"seconds": time.perf_counter() - t, "distance": ref.extra.get("distance"),
                       "delta_min": ref.extra.get("delta_min"), "optimal": ref.optimal, "status": ref.status}}
        for name, solver in solvers.items():
            if name == "z3" and i >= args.z3_agents:
                continue
            t = time.perf_counter()
            r = solver.solve(b.world, x)[0]
            rec[name] = {"seconds": time.perf_counter() - t, "distance": r.extra.get("distance"),
                         "delta_min": r.extra.get("delta_min"), "gap": r.extra.get("gap"), "optimal": r.optimal,
                         "status": r.status}
        records.append(rec)
    out = {"dataset": dataset, "model": model, "norm": norm, "rel_tol": args.rel_tol, "epsilon": args.epsilon,
           "ref_epsilon": REF_EPSILON, "agents": len(X), "load_average": os.getloadavg()[0], "records": records}
    for name in solvers:
        rs = [(r[name], r["ref"]) for r in records if name in r and r[name]["status"] == "ok" and r["ref"]["status"] == "ok"]
        flagged = [(a, f) for a, f in rs if a["optimal"]]
        out[name] = {
            "n": sum(name in r for r in records), "solved": len(rs), "flagged": len(flagged),
            "flagged_within_1pct": sum(a["distance"] <= 1.01 * f["distance"] for a, f in flagged),
            "flagged_worst_ratio": max((a["distance"] / f["distance"] for a, f in flagged), default=None),
            "gap_within_1pct": sum(a["gap"] <= 0.01 for a, _ in rs),
            "bound_violations": sum(a["delta_min"] > f["distance"] or f["delta_min"] > a["distance"] for a, f in rs),
            "seconds_mean": float(np.mean([a["seconds"] for a, _ in rs])) if rs else None,
            "ref_seconds_mean": float(np.mean([f["seconds"] for _, f in rs])) if rs else None,
        }
    out["ref_certified"] = sum(bool(r["ref"]["optimal"]) for r in records)
    return out


def check_table(cells: list[dict]) -> str:
    lines = ["# MACE certificates against the reference (issue 18)", "",
             f"Defaults: rel_tol {cells[0]['rel_tol']:g}, epsilon {cells[0]['epsilon']:g}; reference: epsilon "
             f"{REF_EPSILON:g}, rel_tol 0 (MILP). Target: every answer flagged optimal within 1% of the reference "
             "answer. Flagged: answers certified; within 1%: of those, d <= 1.01 d_ref; worst: max d / d_ref over "
             "flagged; gap <= 1%: answers with (d - delta_min) / d <= 1%; bound violations: a delta_min above the "
             "other run's distance (must be 0). Seconds: mean per explanation, reference in the same run.", "",
             "| data | model | norm | backend | agents | flagged | flagged within 1% | worst d / d_ref | gap <= 1% "
             "| bound violations | s (default / reference) | ref certified |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        for name in ("milp", "z3"):
            m = c[name]
            if not m["n"]:
                continue
            lines.append(f"| {c['dataset']} | {c['model']} | {c['norm']} | {name} | {m['n']} | {m['flagged']} "
                         f"| {m['flagged_within_1pct']}/{m['flagged']} | {fmt(m['flagged_worst_ratio'], '.5f')} "
                         f"| {m['gap_within_1pct']}/{m['solved']} | {m['bound_violations']} "
                         f"| {fmt(m['seconds_mean'])} / {fmt(m['ref_seconds_mean'])} | {c['ref_certified']}/{c['agents']} |")
    flagged = sum(c[n]["flagged"] for c in cells for n in ("milp", "z3"))
    within = sum(c[n]["flagged_within_1pct"] for c in cells for n in ("milp", "z3"))
    lines += ["", f"Overall: {within}/{flagged} answers flagged optimal are within 1% of the reference."]
    return "\n".join(lines) + "\n"


def check_certificates(args: argparse.Namespace) -> None:
    out = Path(args.out)
    cells = []
    for dataset in args.datasets:
        for model in args.models:
            for norm in args.norms:
                t = time.perf_counter()
                c = check_cell(dataset, model, norm, args)
                cells.append(c)
                print(f"{dataset}/{model}/{norm}: milp flagged {c['milp']['flagged']} within 1% "
                      f"{c['milp']['flagged_within_1pct']}; z3 flagged {c['z3']['flagged']} within 1% "
                      f"{c['z3']['flagged_within_1pct']} ({time.perf_counter() - t:.0f}s)", flush=True)
    md = check_table(cells)
    (out / "certificates.md").write_text(md)
    (out / "certificates.json").write_text(json.dumps(cells, indent=1))
    print(md)


def table(cells: list[dict]) -> str:
    tols = sorted({(c.get("rel_tol"), c["epsilon"]) for c in cells}, key=str)
    lines = ["# MACE on real data: MILP (HiGHS) vs z3 (Algorithm 1)", "",
             f"Certificate tolerances (rel_tol, epsilon): {tols}. Seconds per explanation (mean / max), mean "
             "normalized distance, coverage = verified by the real sklearn model / agents with a counterfactual "
             "(in brackets: certified, d - delta_min <= max(rel_tol d, epsilon)); gap <= 1%: share of MILP answers "
             "whose relative gap (d - delta_min) / d is at most 1%. z3 certifies only when it finishes within its time "
             "limit; a z3 answer at the limit is the best found so far. Paper: MACE's own mean seconds at epsilon = "
             "1e-3 (App. C, Table 6).", "",
             "| data | model | norm | MILP s (mean/max) | z3 s (mean/max) | z3 certified | MILP dist (all) | MILP / z3 dist (z3's agents) "
             "| max |d_z3 - d_milp| (both certified) | coverage MILP (certified) | MILP gap <= 1% | paper s | z3 / MILP time (same run) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:  # summaries recomputed from the records, so old cells follow the current definitions
        m, z = summarize(c["records"]["milp"]), summarize(c["records"]["z3"])
        gaps = certified_gaps(c["records"]["milp"], c["records"]["z3"])
        c["agree_max_gap"] = max(gaps) if gaps else None
        cov = f"{m['verified']}/{m['solved']} ({m['certified']})" + (
            f" +{m['no_recourse']} none" if m["no_recourse"] else "")
        ps = c["paper_seconds"]
        ratio = z["seconds_mean"] / m["seconds_mean"] if z["seconds_mean"] and m["seconds_mean"] else None
        speed = "-" if ratio is None else f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.2g}x"
        same = summarize(c["records"]["milp"][: z["n"]])  # MILP on the agents z3 explained
        kw = "".join(f" ({k}={v})" for k, v in c.get("model_kwargs", {}).items())
        share = f"{m['gap_within_1pct']}/{m['solved']}" if m["solved"] else "-"
        lines.append(f"| {c['dataset']} | {c['model']}{kw} | {c['norm']} | {fmt(m['seconds_mean'])} / {fmt(m['seconds_max'])} "
                     f"| {fmt(z['seconds_mean'])} / {fmt(z['seconds_max'])} | {z['certified']}/{z['n']} "
                     f"| {fmt(m['distance_mean'], '.4g')} | {fmt(same['distance_mean'], '.4g')} / {fmt(z['distance_mean'], '.4g')} "
                     f"| {fmt(c['agree_max_gap'], '.1e')} | {cov} | {share} | {fmt(ps, 'g')} | {speed} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- audit (issue 34)

def geco_cell(job: tuple) -> dict:
    """GeCo (defaults, PLAF = the schema's mutability) against MACE's certified l1 optimum on the same agents."""
    dataset, model, args, path = job
    import warnings

    from solvers.geco import GeCo, Plaf
    warnings.filterwarnings("ignore")
    b, X, oracle = sample(dataset, model, args)
    world = b.world
    geco = GeCo(plaf=Plaf(), polish=not args.no_polish).fit(world, b.data.X_train)
    with warming_up(f"GeCo on one agent ({dataset}/{model})"):
        geco.solve(world, X[0])
    records = []
    for x in X:
        r = MACE(norm="one", oracle=oracle, time_limit=args.milp_timeout).solve(world, x)[0]
        t = time.perf_counter()
        g = geco.solve(world, x)
        sec = time.perf_counter() - t
        pts = [q.final_state for q in g if q.found and q.final_state is not None]
        ok = [p for p in pts if oracle(p[None])[0] and not world.schema.mutability_violations(x, p, tol=0.0)[0]]
        dg = float(distance(world.schema, x, np.array(ok), "one").min()) if ok else None
        records.append({"mace_status": r.status, "mace_optimal": bool(r.optimal), "mace_distance": r.extra.get("distance"),
                        "geco_distance": dg, "geco_seconds": sec, "geco_status": g[0].status})
    cert = [r for r in records if r["mace_optimal"] and r["mace_distance"] and r["mace_distance"] > 0]
    within = [r for r in cert if r["geco_distance"] is not None and r["geco_distance"] <= 1.01 * r["mace_distance"]]
    ratios = [r["geco_distance"] / r["mace_distance"] for r in cert if r["geco_distance"] is not None]
    cell = {"dataset": dataset, "model": model, "agents": len(X), "certified": len(cert), "within_1pct": len(within),
            "share": len(within) / len(cert) if cert else None, "worst_ratio": max(ratios) if ratios else None,
            "geco_missing": sum(r["geco_distance"] is None for r in cert),
            "geco_seconds_mean": float(np.mean([r["geco_seconds"] for r in records])),
            "geco_seconds_max": float(np.max([r["geco_seconds"] for r in records])),
            "geco_params": {k: v for k, v in vars(geco).items() if not k.endswith("_") and k != "plaf"},
            "records": records, "load_average": os.getloadavg()[0],
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    save(cell, path)
    print(f"geco {dataset}/{model}: {cell['within_1pct']}/{cell['certified']} within 1%, worst "
          f"{fmt(cell['worst_ratio'], '.4f')}, {cell['geco_seconds_mean']:.3f}s", flush=True)
    return cell


def geco_table(cells: list[dict]) -> str:
    lines = ["# GeCo against MACE's certified l1 optimum (issue 34)", "",
             "GeCo with its defaults (PLAF = the schema's mutability, refinement on), on rejected test agents; "
             "MACE (MILP, l1, real sklearn model as oracle) gives the certified distance. Within 1%: GeCo's "
             "nearest valid answer (real model, every constraint) <= 1.01 x MACE's, over agents MACE certified. "
             "Target: >= 95% per cell, <= 0.3 s mean.", "",
             "| data | model | agents | MACE certified | GeCo within 1% | share | worst GeCo / MACE | GeCo none "
             "| GeCo s (mean / max) |", "|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        share = "-" if c["share"] is None else f"{100 * c['share']:.1f}%"
        lines.append(f"| {c['dataset']} | {c['model']} | {c['agents']} | {c['certified']} | {c['within_1pct']} | {share} "
                     f"| {fmt(c['worst_ratio'], '.4f')} | {c['geco_missing']} | {c['geco_seconds_mean']:.3f} / "
                     f"{c['geco_seconds_max']:.3f} |")
    return "\n".join(lines) + "\n"


def run_geco(args: argparse.Namespace) -> None:
    from multiprocessing import Pool

    out = Path(args.out) / "geco"
    (out / "cells").mkdir(parents=True, exist_ok=True)
    models = [m for m in args.models if m != "lr"]
    jobs = [(d, m, args, out / "cells" / f"{d}-{m}-a{args.agents}-s{args.seed}-{args.tag}.json")
            for d in args.datasets for m in models]
    jobs = [j for j in jobs if not j[3].exists()]
    if jobs:
        with Pool(max(1, args.jobs)) as pool:
            for _ in pool.imap_unordered(geco_cell, jobs):
                pass
    cells = [json.loads(f.read_text()) for f in sorted((out / "cells").glob(f"*-a{args.agents}-s{args.seed}-{args.tag}.json"))]
    order = {d: i for i, d in enumerate(AUDIT_DATASETS)}
    cells.sort(key=lambda c: (order.get(c["dataset"], 9), ["tree", "forest", "lr", "mlp"].index(c["model"])))
    md = geco_table(cells)
    (Path(args.out) / f"geco_{args.tag}.md").write_text(md)
    (Path(args.out) / f"geco_{args.tag}.json").write_text(json.dumps([{k: v for k, v in c.items() if k != "records"}
                                                                      for c in cells], indent=1, default=float))
    print(md)


# ------------------------------------------------------------------------------------------- MACE time before / after

def run_before_after(args: argparse.Namespace) -> None:
    """MACE's seconds per explanation at ``--before`` and now, on the same agents, alternating per agent."""
    import warnings
    warnings.filterwarnings("ignore")
    Before = _load_revision(args.before)
    rows = []
    for dataset in args.datasets:
        for model in args.models:
            for norm in args.norms:
                b, X, oracle = sample(dataset, model, args)
                sec = {"before": [], "after": []}
                flags = {"before": 0, "after": 0}
                with warming_up(f"MACE before and after on one agent ({dataset}/{model}/{norm})"):
                    for cls in (Before, MACE):
                        cls(norm=norm, oracle=oracle, time_limit=args.milp_timeout).solve(b.world, X[0])
                for x in X:
                    for name, cls in (("before", Before), ("after", MACE)):
                        t = time.perf_counter()
                        r = cls(norm=norm, oracle=oracle, time_limit=args.milp_timeout).solve(b.world, x)[0]
                        sec[name].append(time.perf_counter() - t)
                        flags[name] += bool(r.optimal)
                row = {"dataset": dataset, "model": model, "norm": norm, "agents": len(X),
                       "before_s": float(np.mean(sec["before"])), "after_s": float(np.mean(sec["after"])),
                       "before_max_s": float(np.max(sec["before"])), "after_max_s": float(np.max(sec["after"])),
                       "before_flagged": flags["before"], "after_flagged": flags["after"],
                       "load_average": os.getloadavg()[0]}
                rows.append(row)
                print(f"{dataset}/{model}/{norm}: before {row['before_s']:.2f}s after {row['after_s']:.2f}s "
                      f"({row['after_s'] / row['before_s']:.2f}x)", flush=True)
    lines = ["# MACE seconds per explanation before and after issue 34 (same run, alternating per agent)", "",
             f"Before: solvers/mace at {args.before}; after: the working tree. MILP, real sklearn model as oracle.", "",
             "| data | model | norm | agents | before s (mean / max) | after s (mean / max) | after / before "
             "| flagged before / after |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['model']} | {r['norm']} | {r['agents']} | {r['before_s']:.2f} / "
                     f"{r['before_max_s']:.2f} | {r['after_s']:.2f} / {r['after_max_s']:.2f} | "
                     f"{r['after_s'] / r['before_s']:.2f}x | {r['before_flagged']} / {r['after_flagged']} |")
    md = "\n".join(lines) + "\n"
    (Path(args.out) / "before_after_issue34.md").write_text(md)
    (Path(args.out) / "before_after_issue34.json").write_text(json.dumps(rows, indent=1))
    print(md)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["adult", "credit"], help="tabular data sets")
    p.add_argument("--models", nargs="+", default=["tree", "forest", "lr", "mlp"], help="model classes")
    p.add_argument("--norms", nargs="+", default=["zero", "one", "infty"], help="distance norms")
    p.add_argument("--agents", type=int, default=10, help="agents per cell explained by MILP")
    p.add_argument("--z3-agents", type=int, default=3, help="of those, how many z3 explains too")
    p.add_argument("--z3-timeout", type=float, default=120.0, help="z3 seconds per explanation")
    p.add_argument("--milp-timeout", type=float, default=120.0, help="MILP seconds per explanation")
    p.add_argument("--rel-tol", type=float, default=1e-3, help="certificate: relative tolerance")
    p.add_argument("--epsilon", type=float, default=1e-7, help="certificate: absolute floor")
    p.add_argument("--check-certificates", action="store_true",
                   help="check the flag against the reference epsilon=1e-7, rel_tol=0 (norms default to one)")
    p.add_argument("--seed", type=int, default=0, help="world and sample seed")
    p.add_argument("--audit", action="store_true",
                   help="certificate audit: GeCo, MD-PSO and a local search look below delta_min (issue 34)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="--audit: MILP seeds per agent")
    p.add_argument("--mace-rev", default=None,
                   help="--audit: audit MACE as it was at this git revision (audit_<rev>.md), e.g. before issue 34")
    p.add_argument("--jobs", type=int, default=2, help="--audit, --geco: worker processes (cells in parallel)")
    p.add_argument("--geco", action="store_true", help="GeCo's share within 1%% of MACE's certified l1 distance")
    p.add_argument("--no-polish", action="store_true", help="--geco: GeCo without its two-feature polish")
    p.add_argument("--tag", default="current", help="--geco: name of the result files (geco_<tag>.md)")
    p.add_argument("--before-after", action="store_true", help="MACE time per explanation at --before and now")
    p.add_argument("--before", default="a3570b6ecc9f4627f85bf822868c96cf93aa9e54",
                   help="--before-after: the git revision of solvers/mace to compare with")
    p.add_argument("--rules", action="store_true", help="MACE with and without the world's rules (issue 55)")
    p.add_argument("--model-kwargs", default="{}", help='JSON overrides of the model, e.g. {"max_depth": null}')
    p.add_argument("--out", default="benchmarks/results/mace", help="output directory")
    args = p.parse_args(argv)
    out = Path(args.out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    if args.geco or args.before_after or args.audit:
        if "--datasets" not in (argv if argv is not None else sys.argv):
            args.datasets = AUDIT_DATASETS
    if args.geco and args.rules:  # GeCo against MACE, both under the world's rules (issue 55)
        given = argv if argv is not None else sys.argv
        args.datasets = args.datasets if "--datasets" in given else ["adult", "german"]
        run_rules_geco(args)
        return
    if args.geco:
        run_geco(args)
        return
    if args.rules:
        given = argv if argv is not None else sys.argv
        args.norms = args.norms if "--norms" in given else ["one"]
        args.datasets = args.datasets if "--datasets" in given else ["adult", "german"]
        run_rules(args)
        return
    if args.before_after:
        run_before_after(args)
        return
    if args.audit:
        if "--datasets" not in (argv if argv is not None else sys.argv):
            args.datasets = AUDIT_DATASETS
        run_audit(args)
        return
    if args.check_certificates:
        if "--norms" not in (argv if argv is not None else sys.argv):
            args.norms = ["one"]
        check_certificates(args)
        return
    for dataset in args.datasets:
        for model in args.models:
            for norm in args.norms:
                tag = "".join(f"-{k}{v}" for k, v in sorted(json.loads(args.model_kwargs).items()))
                tag += f"-r{args.rel_tol:g}-e{args.epsilon:g}"
                path = out / "cells" / f"{dataset}-{model}{tag}-{norm}-a{args.agents}-z{args.z3_agents}-s{args.seed}.json"
                if path.exists():
                    continue
                t = time.perf_counter()
                c = run_cell(dataset, model, norm, args, path)
                print(f"{dataset}/{model}/{norm}: MILP {c['milp']['seconds_mean']:.2f}s z3 "
                      f"{fmt(c['z3']['seconds_mean'])}s gap {fmt(c['agree_max_gap'], '.1e')} "
                      f"({time.perf_counter() - t:.0f}s)", flush=True)
    cells = [json.loads(f.read_text()) for f in sorted((out / "cells").glob("*.json"))]
    order = {d: i for i, d in enumerate(["adult", "credit", "compas", "german"])}
    cells.sort(key=lambda c: (order.get(c["dataset"], 9), ["tree", "forest", "lr", "mlp"].index(c["model"]),
                              json.dumps(c.get("model_kwargs", {})), NORM_INDEX[c["norm"]]))
    md = table(cells)
    (out / "mace.md").write_text(md)
    (out / "mace.json").write_text(json.dumps([{k: v for k, v in c.items() if k != "records"} for c in cells], indent=1))
    print(md)


if __name__ == "__main__":
    main()
