"""Learning that carries the answer where the model is a black box (issue 56).

    python benchmarks/blackbox_generators.py                     # 8 cells, 500 labels, 100 held-out agents
    python benchmarks/blackbox_generators.py --cells german/forest --budgets 1x64,2x256,8x2000 --latency-ms 20
    python benchmarks/blackbox_generators.py --remote-only          # the remote timings again, alone
    python benchmarks/blackbox_generators.py --rescore proposer_surrogate --cells german/mlp  # the same fit, answered again
    python benchmarks/blackbox_generators.py --refit search_knn,proposer_expert --cells german/forest  # fitted again
    python benchmarks/blackbox_generators.py --spread-seeds 0,1,2,3 --cells german/forest    # the fit's seed spread
    python benchmarks/blackbox_generators.py --spread-seeds 0,1,2,3 --spread-methods proposer,proposer_surrogate,search_no_net --cells german/mlp

Per cell (data set x model, seed 0; labels from ``benchmarks/tabular_generators.py``'s cache, the same
``Cell``: held-out rejected *test* rows labelled by MACE with a certificate, training agents labelled at
rel_tol 1e-2):

- the model is wrapped in ``envs.black_box.BlackBoxModel``: ``predict_proba`` only, every call and row
  counted, and a per-answer ``Budget`` (R round trips, N rows) enforced: a search cannot read a split;
- methods, all through that wrapper and each at every budget of ``--budgets`` (RxN):
  ``proposer`` (the network, imitation of MACE), ``proposer_expert`` (then improved on the model's own
  reward: expert iteration, its training calls counted), ``proposer_surrogate`` (the network and a
  surrogate of the model's logit learnt from its answers near the labels' boundary: a white-box search
  on the surrogate proposes first and the surrogate picks half of round one's rows; not used where its
  held-out error says it did not learn the model), ``proposer_student_round_two`` (the proposer with a student of
  the forest's corners, learnt from the model's answers at fit time, whose likeliest accepted corners are asked in
  round two only: first by the agents round one left without an answer, and those nearer than an answer ahead of
  its moves: ``student_use="round_two"``), ``search_no_net`` (the same search, the
  proposals the labels' change centroids: no network, the baseline the issue names), ``search_knn`` (the
  same search, the nearest training agents' changes); and GeCo (``partial_eval=False``: the black-box
  route; no budget: its calls and rows reported). ``--methods`` chooses them; ``proposer_surrogates``
  (three surrogates averaged: three times the fit) and ``proposer_student_round_two`` (2,000,000 rows asked for the student
  at fit time) are the spread's (``--spread-methods``), not the default;
- **optimal**: share of MACE-solved held-out agents answered validly within 1% of MACE's certified distance;
  **valid**: accepted by the real model, no constraint broken; rows per answer (median, max) and calls;
- ``--latency-ms``: the model behind a fixed wait per call (a remote scoring API); the first
  ``--remote-agents`` agents answered one request at a time, end-to-end p50/p99 per answer for the
  proposer, the proposer with its surrogate and the no-network search at the largest budget with 2 calls
  or fewer, and GeCo. Two cells run at once disturb each other's timings: ``--remote-only`` times the
  generators each cell's run saved (``--generators``) again, alone, and keeps the cell's other figures.

Writes ``benchmarks/results/blackbox_generators.{md,json}``, one JSON per cell under
``benchmarks/results/blackbox_generators/`` (reused unless ``--force``; a forced run keeps the cell's
``--spread-seeds`` figures, whose fits are their own), and ``frontier.png`` there
(optimal share against rows scored per answer, per method, per cell). CFRL is not rerun here: CFRL at
its default 100,000 steps is ``benchmarks/cfrl_budget.py``; the CFRL figures of ``docs/peers.md`` are
2,000 steps (alibi's default is 100,000) and say so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox import save  # noqa: E402
from benchmarks.tabular_generators import CELLS, Cell  # noqa: E402
from benchmarks.warmup import warming_up  # noqa: E402
from envs.black_box import BlackBoxModel, Budget  # noqa: E402
from evaluation.tabular_experiment import score_answers  # noqa: E402
from learners.tabular import TabularGenerator, TabularLabels, build_tabular_generator  # noqa: E402

OUT = Path("benchmarks/results")
METHODS = {"proposer": {"proposals": "network"}, "proposer_expert": {"proposals": "network", "expert_rounds": 1},
           "proposer_surrogate": {"proposals": "network", "surrogate": True},
           "proposer_surrogates": {"proposals": "network", "surrogate": True, "surrogate_members": 3},
           "proposer_student_round_two": {"proposals": "network", "student_agents": 10000, "student_use": "round_two",
                                          "student_pool": 1000},
           "search_no_net": {"proposals": "averages"}, "search_knn": {"proposals": "neighbours"}}
NAMES = {"proposer": "proposer (network, imitation)", "proposer_expert": "proposer + model reward (expert iteration)",
         "proposer_surrogate": "proposer + surrogate of the model (learnt from its answers)",
         "proposer_surrogates": "proposer + 3 surrogates averaged (the fit's seed matters less)",
         "proposer_student_round_two": "proposer + student of its corners in round two",
         "search_no_net": "same search, no network (label averages)", "search_knn": "same search, k-NN proposals",
         "geco": "GeCo (black box, no budget)"}


def parse_budgets(text: str) -> list[Budget]:
    out = []
    for part in text.split(","):
        calls, sep, rows = part.partition("x")
        if not sep or not calls.isdigit() or not rows.isdigit():
            raise SystemExit(f"--budgets: expected RxN items such as 2x256, got {part!r}")
        out.append(Budget(int(calls), int(rows)))
    return out


def answers_within(gen: Any, world: Any, X: np.ndarray, budget: Budget) -> Any:
    """``gen``'s answers to ``X`` in one batch, through a fresh black box that holds ``budget`` per agent."""
    bb = BlackBoxModel(world.model)
    with bb.budget(budget, agents=len(X)):
        return gen.recommend_within(replace(world, model=bb), X, budget)


def run_budget(gen: Any, world: Any, X: np.ndarray, budget: Budget, mace_d: np.ndarray, mace_ok: np.ndarray
               ) -> dict[str, Any]:
    t = time.perf_counter()
    rec = answers_within(gen, world, X, budget)
    sec = time.perf_counter() - t
    m = score_answers(world, X, rec.CF, rec.found, mace_d, mace_ok, "one")
    m.update(budget={"calls": budget.calls, "rows": budget.rows}, calls=int(rec.calls),
             rows_median=float(np.median(rec.rows)), rows_max=int(np.max(rec.rows)), ms_per_agent=1e3 * sec / len(X))
    return m


def run_geco(world: Any, domain: np.ndarray, X: np.ndarray, mace_d: np.ndarray, mace_ok: np.ndarray) -> dict[str, Any]:
    from solvers.geco import GeCo, Plaf

    bb = BlackBoxModel(world.model)
    bworld = replace(world, model=bb)
    geco = GeCo(plaf=Plaf(), partial_eval=False).fit(bworld, domain)
    with warming_up("GeCo (black box) on one agent"):
        geco.solve(bworld, X[0])
    CF = np.full(X.shape, np.nan)
    calls, rows, secs = [], [], []
    for i, x in enumerate(X):
        c0, r0, t = bb.calls, bb.rows, time.perf_counter()
        found = geco.solve(bworld, x)
        secs.append(time.perf_counter() - t)
        calls.append(bb.calls - c0)
        rows.append(bb.rows - r0)
        ok = [r for r in found if r.status == "ok" and r.valid]
        if ok:
            CF[i] = np.asarray(min(ok, key=lambda r: float(r.extra.get("distance", np.inf))).extra["counterfactual"])
    m = score_answers(world, X, CF, ~np.isnan(CF).any(1), mace_d, mace_ok, "one")
    m.update(calls=float(np.median(calls)), rows_median=float(np.median(rows)), rows_max=int(np.max(rows)),
             ms_per_agent=1e3 * float(np.mean(secs)))
    return m


FULL_RUN = tuple(m for m in METHODS if m not in ("proposer_surrogates", "proposer_student_round_two"))  # a full run's methods (the others: the spread's)
REMOTE = ("proposer", "proposer_surrogate", "search_no_net")  # the generators timed against the remote model


def request_ms(gen: Any, world: Any, X: np.ndarray, budget: Budget, latency: float) -> list[float]:
    """ms per answer of ``gen``, one agent per request, the model behind ``latency`` seconds per call (after one
    answer not timed: the warm-up, and the call's time known to the search)."""
    bb = BlackBoxModel(world.model, latency_s=latency)
    bworld = replace(world, model=bb)
    gen.recommend_within(bworld, X[:1], budget)
    ms = []
    for x in X:
        t = time.perf_counter()
        with bb.budget(budget):
            gen.recommend_within(bworld, x[None], budget)
        ms.append(1e3 * (time.perf_counter() - t))
    return ms


def geco_ms(world: Any, domain: np.ndarray, X: np.ndarray, latency: float) -> list[float]:
    """GeCo's ms per answer against the same remote model (its own budget: it runs to its end)."""
    from solvers.geco import GeCo, Plaf

    bworld = replace(world, model=BlackBoxModel(world.model, latency_s=latency))
    geco = GeCo(plaf=Plaf(), partial_eval=False).fit(bworld, domain)
    ms = []
    for x in X:
        t = time.perf_counter()
        geco.solve(bworld, x)
        ms.append(1e3 * (time.perf_counter() - t))
    return ms


def remote(gens: dict[str, Any], world: Any, domain: np.ndarray, X: np.ndarray, budget: Budget, latency: float
           ) -> dict[str, Any]:
    """End-to-end ms per answer, one agent per request, the model behind ``latency`` seconds per call."""
    out = {}
    for name, gen in gens.items():
        ms = request_ms(gen, world, X, budget, latency)
        out[name] = {"p50_ms": float(np.median(ms)), "p99_ms": float(np.quantile(ms, 0.99)), "agents": len(ms)}
    ms = geco_ms(world, domain, X, latency)
    out["geco"] = {"p50_ms": float(np.median(ms)), "p99_ms": float(np.quantile(ms, 0.99)), "agents": len(ms)}
    return out


def cell_labels(cell: str, args: argparse.Namespace) -> tuple[Cell, Any, TabularLabels]:
    """The cell, its held-out agents' MACE labels and its training labels (the solved ones of its budget)."""
    c = Cell.of(cell, args)
    tl = c.test_labels(args)
    train, _, _ = c.train_labels(args)
    rows = np.flatnonzero(train.ok[: c.sizes[-1]])
    return c, tl, TabularLabels(train.X[rows], train.cf[rows], train.distance[rows])


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    c, tl, labels = cell_labels(cell, args)
    world, test = c.build.world, c.test
    mace_d, mace_ok = tl.distance, tl.ok
    out: dict[str, Any] = {"cell": cell, "labels": int(len(labels.X)), "test_agents": int(len(test)),
                           "mace_solved": int(mace_ok.sum()), "methods": {}, "training": {}}
    budgets = parse_budgets(args.budgets)
    gens = {name: fit_and_score(cell, name, c, tl, labels, budgets, out, args) for name in args.methods.split(",")}
    out["geco"] = run_geco(world, c.build.data.X_train, test, mace_d, mace_ok)
    print(f"[{cell}] geco: optimal {out['geco']['optimal_share']:.3f}, rows median {out['geco']['rows_median']:.0f}",
          flush=True)
    if args.latency_ms > 0:
        out["remote"] = remote_entry(cell, c, {k: gens[k] for k in REMOTE}, budgets, args)
    out["load_average"] = os.getloadavg()[0]
    return out


def keep_spread(out: dict[str, Any], path: Path) -> dict[str, Any]:
    """``out`` (a cell's full run) with the spread of the cell's saved JSON at ``path``, where it has one: the
    spread's fits are its own (``--spread-seeds``), which a full run neither refits nor scores."""
    if path.exists():
        old = json.loads(path.read_text()).get("spread")
        if old:
            out["spread"] = old
    return out


def fit_and_score(cell: str, name: str, c: Cell, tl: Any, labels: TabularLabels, budgets: list[Budget],
                  out: dict[str, Any], args: argparse.Namespace) -> TabularGenerator:
    """Fit method ``name`` through the black box (its training calls counted), score it at every budget into
    ``out`` and save it under ``--generators`` (``--rescore`` answers with it again, ``--remote-only`` times it)."""
    world = c.build.world
    t = time.perf_counter()
    bb = BlackBoxModel(world.model)  # the improvement rounds' calls go through the black box too
    gen = build_tabular_generator("proposer", METHODS[name]).fit(replace(world, model=bb), labels, seed=args.seed)
    out["training"][name] = {"seconds": time.perf_counter() - t, "model_calls": bb.calls, "model_rows": bb.rows,
                             **({"surrogate": gen.fit_info_["surrogate"]} if "surrogate" in gen.fit_info_ else {})}
    out["methods"][name] = []
    for b in budgets:
        m = run_budget(gen, world, c.test, b, tl.distance, tl.ok)
        out["methods"][name].append(m)
        print(f"[{cell}] {name} {b.calls}x{b.rows}: optimal {m['optimal_share']:.3f}, valid {m['validity']}, "
              f"rows median {m['rows_median']:.0f}", flush=True)
    gen.save(Path(args.generators) / cell.replace("/", "_") / name)
    return gen


def refit(cell: str, path: Path, names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """``--refit``: methods ``names`` fitted again and scored at every budget (saved for a later ``--rescore``);
    the cell's other figures are kept."""
    if not path.exists():
        raise SystemExit(f"--refit: {path} is missing; run the cell first")
    out = json.loads(path.read_text())
    c, tl, labels = cell_labels(cell, args)
    out.setdefault("training", {})
    for name in names:
        fit_and_score(cell, name, c, tl, labels, parse_budgets(args.budgets), out, args)
    out["rescored"] = sorted(set(out.get("rescored", [])) - set(names))  # fitted again: no longer a rescore
    out["refitted"] = sorted(set(out.get("refitted", [])) | set(names))
    return out


def remote_entry(cell: str, c: Cell, gens: dict[str, Any], budgets: list[Budget], args: argparse.Namespace
                 ) -> dict[str, Any]:
    """The cell's ``remote`` record at the largest budget with 2 calls or fewer, and the load it ran under."""
    small = max((b for b in budgets if b.calls <= 2), key=lambda b: (b.calls, b.rows), default=budgets[0])
    load = os.getloadavg()[0]
    r = {"latency_ms": args.latency_ms, "budget": {"calls": small.calls, "rows": small.rows},
         "alone": bool(args.remote_only), "load_average": load,
         **remote(gens, c.build.world, c.build.data.X_train, c.test[: args.remote_agents], small, args.latency_ms / 1e3)}
    print(f"[{cell}] remote {args.latency_ms} ms/call: " + ", ".join(
        f"{k} p50 {v['p50_ms']:.0f} ms" for k, v in r.items() if isinstance(v, dict) and "p50_ms" in v), flush=True)
    return r


def remote_only(cell: str, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``--remote-only``: the cell's saved generators (from its full run) timed again against the remote model,
    alone on the machine; the cell's other figures are kept."""
    if not path.exists():
        raise SystemExit(f"--remote-only: {path} is missing; run the cell first (without --remote-only)")
    out = json.loads(path.read_text())
    where = Path(args.generators) / cell.replace("/", "_")
    missing = [k for k in REMOTE if not (where / k).exists()]
    if missing:
        raise SystemExit(f"--remote-only: no saved generators {missing} under {where}; rerun the cell with --force")
    gens = {k: TabularGenerator.load(where / k) for k in REMOTE}
    out["remote"] = remote_entry(cell, Cell.of(cell, args), gens, parse_budgets(args.budgets), args)
    return out


def rescore(cell: str, path: Path, names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """``--rescore``: the cell's saved generators ``names`` (from its full run: the same fits) answer the held-out
    agents again at every budget, after a change to how they answer; the cell's other figures are kept."""
    if not path.exists():
        raise SystemExit(f"--rescore: {path} is missing; run the cell first")
    out = json.loads(path.read_text())
    where = Path(args.generators) / cell.replace("/", "_")
    c = Cell.of(cell, args)
    tl = c.test_labels(args)
    for name in names:
        if not (where / name).exists():
            raise SystemExit(f"--rescore: no saved generator {name!r} under {where}; fit it with --refit {name}")
        gen = TabularGenerator.load(where / name)
        out["methods"][name] = []
        for b in parse_budgets(args.budgets):
            m = run_budget(gen, c.build.world, c.test, b, tl.distance, tl.ok)
            out["methods"][name].append(m)
            print(f"[{cell}] {name} {b.calls}x{b.rows} (rescored): optimal {m['optimal_share']:.3f}, "
                  f"valid {m['validity']}, rows median {m['rows_median']:.0f}", flush=True)
    out["rescored"] = sorted(set(out.get("rescored", [])) | set(names))
    return out


SPREAD = ("proposer", "search_no_net")  # refitted per seed by ``--spread-seeds`` (``--spread-methods``' default)
SPREAD_BUDGETS = (Budget(2, 256), Budget(8, 2000))  # the two budgets


def spread(cell: str, path: Path, seeds: list[int], args: argparse.Namespace,
           methods: tuple[str, ...] = SPREAD) -> dict[str, Any]:
    """``--spread-seeds``: ``methods`` (the proposer and the same search without the network) fitted again
    with each of ``seeds`` (the world, its labels and held-out agents as they are: only the fit's seed
    moves), scored at the issue's two budgets. A cell of 36 agents moves by 0.028 an agent: one fit's share
    is one draw."""
    if not path.exists():
        raise SystemExit(f"--spread-seeds: {path} is missing; run the cell first")
    out = json.loads(path.read_text())
    c, tl, labels = cell_labels(cell, args)
    world = c.build.world
    res: dict[str, Any] = out.get("spread") or {}
    if res.get("seeds") != seeds:  # the same seeds: the methods not asked for now are kept
        res = {"seeds": seeds, "methods": {}}
    for name in methods:
        res["methods"][name] = {f"{b.calls}x{b.rows}": [] for b in SPREAD_BUDGETS}
        for seed in seeds:
            gen = spread_fit(cell, name, seed, world, labels, args)
            for b in SPREAD_BUDGETS:
                m = run_budget(gen, world, c.test, b, tl.distance, tl.ok)
                res["methods"][name][f"{b.calls}x{b.rows}"].append(m["optimal_share"])
                print(f"[{cell}] {name} seed {seed} {b.calls}x{b.rows}: optimal {m['optimal_share']:.3f}", flush=True)
    out["spread"] = res
    return out


def spread_dir(generators: str | Path, cell: str, seed: int) -> Path:
    """Where the fits of ``cell`` with fit seed ``seed`` are saved under ``generators`` (the spread's, and
    ``self_labels.py``'s beside them): ``<generators>/<cell>/spread/seed<seed>``."""
    return Path(generators) / cell.replace("/", "_") / "spread" / f"seed{seed}"


def spread_fit(cell: str, name: str, seed: int, world: Any, labels: TabularLabels, args: argparse.Namespace) -> Any:
    """Method ``name`` fitted with ``seed``, saved under ``--generators``/cell/spread/seed<seed>/name and loaded from
    there when it is (an interrupted spread resumes; a change to how generators answer is scored on the same
    fits); ``--force`` fits again."""
    where = spread_dir(args.generators, cell, seed) / name
    if where.exists() and not args.force:
        return TabularGenerator.load(where)
    gen = build_tabular_generator("proposer", METHODS[name]).fit(replace(world, model=BlackBoxModel(world.model)),
                                                                labels, seed=seed)
    gen.save(where)
    return gen


def spread_table(cells: list[dict[str, Any]]) -> list[str]:
    """Per cell with ``spread``: each method's optimal share over the fit seeds, min-max (mean); a method a
    cell's spread did not fit is a dash."""
    rows = [c for c in cells if "spread" in c]
    if not rows:
        return []
    names = [n for n in METHODS if any(n in c["spread"]["methods"] for c in rows)]
    heads = [f"{NAMES[n].split(' (')[0]} {b.calls}x{b.rows}" for n in names for b in SPREAD_BUDGETS]
    out = ["## The same cells fitted with other seeds (`--spread-seeds`)", "",
           "Only the fit's seed moves (the labels, the held-out agents and the search are the same): optimal share "
           "min-max (mean) over the seeds, fitted on the machine of this run. The table above is seed 0 fitted on "
           "the machine of the cell's full run: a fit on another CPU draws other floats, so its seed 0 need not "
           "give the same share.", "",
           "| data | model | agents | seeds | " + " | ".join(heads) + " |", "|---|---|---:|---|" + "---|" * len(heads)]
    for c in rows:
        d, m = c["cell"].split("/")
        sp = c["spread"]
        vals = [sp["methods"].get(n, {}).get(f"{b.calls}x{b.rows}") for n in names for b in SPREAD_BUDGETS]
        out.append(f"| {d} | {m} | {c['mace_solved']} | {', '.join(map(str, sp['seeds']))} | " + " | ".join(
            f"{min(v):.2f}-{max(v):.2f} ({np.mean(v):.2f})" if v else "-" for v in vals) + " |")
    return out + [""]


def _load(r: dict[str, Any]) -> str:
    return f" (load {r['load_average']:.1f})" if "load_average" in r else ""


def report(cells: list[dict[str, Any]], command: str) -> str:
    lines = ["# Black-box generators: learning against the same search without it (`benchmarks/blackbox_generators.py`)",
             "", f"Command: `{command}`. The model seen only through `predict_proba` (`envs.black_box.BlackBoxModel`), "
             "every call and row counted and the budget enforced per answer. **optimal**: share of the MACE-solved "
             "held-out rejected test agents answered validly within 1% of MACE's certified l1 distance; **valid**: accepted "
             "by the real model, nothing broken. **rows**: rows scored per answer, median / max; **calls**: round "
             "trips (the batch shares each). GeCo has no budget. CFRL is not in this table: alibi's "
             "CounterfactualRLTabular at its default 100,000 steps on German forest and German MLP is in "
             "`benchmarks/results/cfrl_budget.md` (`benchmarks/cfrl_budget.py`); `docs/peers.md`'s CFRL figures are "
             "2,000 steps and say so.", "",
             *summary(cells), *spread_table(cells), "## Every budget", "",
             "| data | model | agents | method | budget R x N | optimal | valid | rows med / max | calls | ms / agent |",
             "|---|---|---:|---|---|---:|---:|---|---:|---:|"]
    for c in cells:
        d, m = c["cell"].split("/")
        for name, runs in c["methods"].items():
            for r in runs:
                lines.append(f"| {d} | {m} | {c['mace_solved']} | {NAMES[name]} | {r['budget']['calls']} x "
                             f"{r['budget']['rows']} | {r['optimal_share']:.3f} | {_f(r['validity'])} | "
                             f"{r['rows_median']:.0f} / {r['rows_max']} | {r['calls']} | {r['ms_per_agent']:.2f} |")
        g = c["geco"]
        lines.append(f"| {d} | {m} | {c['mace_solved']} | {NAMES['geco']} | - | {g['optimal_share']:.3f} | "
                     f"{_f(g['validity'])} | {g['rows_median']:.0f} / {g['rows_max']} | {g['calls']:.0f} | "
                     f"{g['ms_per_agent']:.1f} |")
    if any("remote" in c for c in cells):
        lines += ["", "## A remote model (a fixed wait per call), one agent per request", "",
                  "Measured *alone*: `--remote-only`, the saved generators timed with nothing else running (load: the "
                  "1-minute load average when it started); otherwise during the full run, beside whatever else ran.", "",
                  "| data | model | latency per call | budget | method | p50 ms | p99 ms | agents | measured |",
                  "|---|---|---|---|---|---:|---:|---:|---|"]
        for c in cells:
            r = c.get("remote")
            if not r:
                continue
            d, m = c["cell"].split("/")
            for k, v in r.items():
                if isinstance(v, dict) and "p50_ms" in v:
                    lines.append(f"| {d} | {m} | {r['latency_ms']} ms | {r['budget']['calls']} x {r['budget']['rows']} | "
                                 f"{NAMES.get(k, k)} | {v['p50_ms']:.1f} | {v['p99_ms']:.1f} | {v['agents']} | "
                                 f"{'alone' if r.get('alone') else 'in the run'}"
                                 f"{_load(r)} |")
    again = [f"{c['cell']} ({', '.join(c['rescored'])})" for c in cells if c.get("rescored")]
    if again:
        lines += ["", "Answered again with their saved fits after a change to the search (`--rescore`; their "
                  "ms / agent measured then, the cell's other rows from its full run): " + "; ".join(again) + "."]
    anew = [f"{c['cell']} ({', '.join(c['refitted'])})" for c in cells if c.get("refitted")]
    if anew:
        lines += ["", "Fitted again after their full run (`--refit`: the same labels, seed and agents; the cell's "
                  "other rows from its full run): " + "; ".join(anew) + "."]
    lines += ["", "Training: " + "; ".join(
        f"{c['cell']} expert iteration {c['training']['proposer_expert']['model_calls']} calls, "
        f"{c['training']['proposer_expert']['model_rows']:,} rows, {c['training']['proposer_expert']['seconds']:.0f} s"
        for c in cells if "proposer_expert" in c["training"]) + ".", "", "Surrogate: " + "; ".join(
        f"{c['cell']} {s['rows']:,} rows in {s['calls']} calls, held-out logit error near the boundary {s['sigma']:.3f}, "
        f"{'used' if s['used'] else 'not used'}, {c['training']['proposer_surrogate']['seconds']:.0f} s to fit"
        for c in cells if (s := c["training"].get("proposer_surrogate", {}).get("surrogate"))) + "."]
    return "\n".join(lines) + "\n"


def summary(cells: list[dict[str, Any]]) -> list[str]:
    """The optimal share at the issue's two budgets (2 x 256 and 8 x 2000) per cell and method."""
    cols = [("proposer", "proposer"), ("proposer_expert", "+ expert iteration"), ("proposer_surrogate", "+ surrogate"),
            ("search_no_net", "no network"),
            ("search_knn", "k-NN proposals")]
    out = ["## At the issue's budgets: optimal share", "",
           "| data | model | agents | " + " | ".join(f"{n} 2x256" for _, n in cols) + " | " +
           " | ".join(f"{n} 8x2000" for _, n in cols) + " | GeCo (rows) |",
           "|---|---|---:|" + "---:|" * (2 * len(cols)) + "---:|"]
    for c in cells:
        d, m = c["cell"].split("/")

        def at(key: str, calls: int, rows: int, c: dict[str, Any] = c) -> str:
            r = next((r for r in c["methods"].get(key, []) if r["budget"] == {"calls": calls, "rows": rows}), None)
            return "-" if r is None else f"{r['optimal_share']:.2f}"

        out.append(f"| {d} | {m} | {c['mace_solved']} | " + " | ".join(at(k, 2, 256) for k, _ in cols) + " | " +
                   " | ".join(at(k, 8, 2000) for k, _ in cols) +
                   f" | {c['geco']['optimal_share']:.2f} ({c['geco']['rows_median']:,.0f}) |")
    return out + [""]


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}"


def plot_frontier(cells: list[dict[str, Any]], path: Path) -> None:
    """Per cell: optimal share against rows scored per answer (median, log), one line per method over the
    budgets, GeCo as a point."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(cells)
    cols = min(4, n)
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(4 * cols, 3.2 * ((n + cols - 1) // cols)),
                             squeeze=False)
    for ax, c in zip(axes.flat, cells, strict=False):
        for name, runs in c["methods"].items():
            ax.plot([r["rows_median"] for r in runs], [r["optimal_share"] for r in runs], marker="o", label=NAMES[name])
        ax.scatter([c["geco"]["rows_median"]], [c["geco"]["optimal_share"]], marker="s", color="black", label=NAMES["geco"])
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(plt.NullFormatter())  # a narrow range's minor labels overlap
        ax.set_ylim(0, 1.02)
        ax.set_title(c["cell"])
        ax.set_xlabel("rows scored per answer (median)")
        ax.set_ylabel("within 1% of MACE")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_label_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments that choose a cell's labels and held-out agents (shared with ``round_two_bound.py``)."""
    p.add_argument("--sizes", default="500", help="training labels (the tabular_generators cache of that budget)")
    p.add_argument("--test-agents", type=int, default=100, help="held-out rejected test rows per cell (at most)")
    p.add_argument("--seed", type=int, default=0, help="world, split, sample and training seed")
    p.add_argument("--jobs", type=int, default=2, help="MACE labelling processes (labels missing from the cache)")
    p.add_argument("--cache", default="data_cache/tabular_generators", help="label chunks (resumable)")


def kept_cell(path: Path, asked: dict[str, Any], force: bool) -> dict[str, Any] | None:
    """A cell's results written before for the same question (every key of ``asked`` equal), or None (missing,
    another question, or ``force``): a benchmark that writes a JSON per cell resumes by cell."""
    if force or not path.exists():
        return None
    done = json.loads(path.read_text())
    return done if all(done.get(k) == v for k, v in asked.items()) else None


def with_cell_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with what ``Cell.of`` reads of tabular_generators' other arguments, at their defaults."""
    args.sizes_for, args.numeric_scale, args.resample_prob, args.rules, args.quiet = [], 0.05, 0.15, False, True
    return args


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", default=",".join(CELLS), help="comma-separated dataset/model cells")
    add_label_arguments(p)
    p.add_argument("--budgets", default="1x64,1x128,2x256,4x1000,8x2000", help="R x N budgets per answer")
    p.add_argument("--latency-ms", type=float, default=20.0, help="remote model: ms per call (0: skip)")
    p.add_argument("--remote-agents", type=int, default=30, help="agents answered one by one against the remote model")
    p.add_argument("--out", default=str(OUT), help="results directory")
    p.add_argument("--force", action="store_true", help="recompute cells whose JSON exists")
    p.add_argument("--generators", default="data_cache/blackbox_generators",
                   help="where each cell's generators for the remote pass are saved")
    p.add_argument("--remote-only", action="store_true",
                   help="only the remote timings again, from the saved generators (run it alone on the machine)")
    p.add_argument("--rescore", default="",
                   help="comma-separated saved generators (every method a full run or --refit fitted) to score again "
                        "at every budget, keeping their fits and the cell's other figures (after a change to how they answer)")
    p.add_argument("--refit", default="",
                   help="comma-separated methods to fit again and score at every budget (saved), keeping the cell's "
                        "other figures")
    p.add_argument("--methods", default=",".join(FULL_RUN),
                   help=f"comma-separated methods a full run fits and scores (of {', '.join(METHODS)}; the default "
                        "leaves out proposer_surrogates, three times the fit of proposer_surrogate: see --spread-methods)")
    p.add_argument("--spread-seeds", default="",
                   help="comma-separated fit seeds: the proposer and the no-network search fitted again with each, "
                        "scored at 2x256 and 8x2000 (the spread a single fit's share is drawn from)")
    p.add_argument("--spread-methods", default=",".join(SPREAD),
                   help=f"comma-separated methods --spread-seeds fits again (of {', '.join(METHODS)})")
    args = p.parse_args(argv)
    if not set(args.methods.split(",")) <= set(METHODS) or not set(REMOTE) <= set(args.methods.split(",")):
        raise SystemExit(f"--methods: expected some of {', '.join(METHODS)} with {', '.join(REMOTE)}, got {args.methods!r}")
    if not set(args.spread_methods.split(",")) <= set(METHODS):
        raise SystemExit(f"--spread-methods: expected some of {', '.join(METHODS)}, got {args.spread_methods!r}")
    for flag, value in (("--rescore", args.rescore), ("--refit", args.refit)):
        if value and not set(value.split(",")) <= set(METHODS):
            raise SystemExit(f"{flag}: expected some of {', '.join(METHODS)}, got {value!r}")
    with_cell_defaults(args)
    out = Path(args.out)
    cell_dir = out / "blackbox_generators"
    cell_dir.mkdir(parents=True, exist_ok=True)
    for cell in args.cells.split(","):
        if cell not in CELLS:
            raise SystemExit(f"--cells: unknown cell {cell!r}; known: {', '.join(CELLS)}")
        path = cell_dir / f"{cell.replace('/', '_')}.json"
        if args.refit:
            save(refit(cell, path, args.refit.split(","), args), path)
        if args.rescore:
            save(rescore(cell, path, args.rescore.split(","), args), path)
        if args.spread_seeds:
            save(spread(cell, path, [int(v) for v in args.spread_seeds.split(",")], args,
                        tuple(args.spread_methods.split(","))), path)
        if args.remote_only:
            save(remote_only(cell, path, args), path)
        elif not (args.rescore or args.refit or args.spread_seeds) and (not path.exists() or args.force):  # the full run
            save(keep_spread(run_cell(cell, args), path), path)
    # the tables, json and plot hold every cell with a saved JSON (a run of some cells keeps the others)
    paths = [cell_dir / f"{cell.replace('/', '_')}.json" for cell in CELLS]
    cells = [json.loads(path.read_text()) for path in paths if path.exists()]
    command = "python benchmarks/blackbox_generators.py" + "".join(" " + a for a in (sys.argv[1:] if argv is None else argv))
    (out / "blackbox_generators.md").write_text(report(cells, command))
    (out / "blackbox_generators.json").write_text(json.dumps(cells, indent=1, default=float))
    plot_frontier(cells, cell_dir / "frontier.png")
    print(report(cells, command))


if __name__ == "__main__":
    main()
