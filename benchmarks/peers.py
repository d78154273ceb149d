"""Peers side by side (issue 36): DiCE and alibi's CounterfactualRL beside MACE, GeCo, MD-PSO and our
amortized generator, on the same agents, models and constraints.

    python benchmarks/peers.py [--datasets adult german compas credit] [--models forest mlp]
                               [--agents 50] [--diverse-agents 5] [--label-agents 150]
                               [--peers dice_random dice_genetic dice_kdtree cfrl] [--cfrl-steps 2000]
                               [--alibi-venv benchmarks/peers/.alibi-venv] [--seed 0]

One command reruns everything: the alibi venv is made first when missing
(``benchmarks/peers/make_alibi_venv.sh``), every cell is written to
``benchmarks/results/peers/cells/<data>-<model>-a<agents>-...json`` as it finishes (a rerun skips
finished cells; ``--force`` redoes them) and the report ``benchmarks/results/peers.md`` (+ ``.json``)
is rebuilt from the cells on disk.

Like with like, per cell (data set x model, seed 0):

- **agents**: the same seeded sample of rejected rows of the test split (``benchmarks.blackbox.sample``);
- **model**: the project's classifier (``data_gen.classifiers.build``). DiCE calls it through a
  wrapper (its own data frame -> our encoded rows -> the white box, which equals scikit-learn's
  decisions); CFRL runs in another venv and gets a scikit-learn model retrained there from the same
  rows, parameters and seed, checked to decide every train and test row as ours does (the count of
  disagreements is in the cell);
- **constraints**: immutable features are not varied (DiCE ``features_to_vary``, CFRL
  ``immutable_features``); increase-/decrease-only numeric and ordinal features get per-agent ranges
  (DiCE ``permitted_range`` [x, upper] / [lower, x], CFRL ``ranges`` [0, 1] / [-1, 0]), increase-only
  binaries the allowed levels (DiCE; CFRL cannot say it); domains: DiCE's and CFRL's own (observed
  ranges, the data's categories). Whatever a peer still breaks is counted by
  ``CounterfactualScorer.violations`` (schema bounds, integrality, one-hot, mutability) as its violations.

Every answer, ours and theirs, is re-checked by the same scorer with the real model.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

if __name__ == "__main__":  # DiCE's progress bars, off in a run of the script (an importer's environment is left alone)
    os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.blackbox import sample, save  # noqa: E402
from benchmarks.peers_report import PEERS, dominance, report  # noqa: E402
from benchmarks.warmup import warming_up  # noqa: E402
from data_gen.classifiers import build, model_params  # noqa: E402
from envs.recourse import Recourse  # noqa: E402
from envs.tabular import TabularWorld  # noqa: E402
from evaluation.counterfactual_metrics import (  # noqa: E402
    Counted,
    CounterfactualScorer,
    ratio_summary,
    summarize,
)
from solvers.geco import GeCo, Plaf  # noqa: E402
from solvers.mace import MACE  # noqa: E402
from solvers.mace.distance import distance_features  # noqa: E402
from solvers.pso import MDPSO  # noqa: E402

HERE = Path(__file__).resolve().parent
DICE_METHODS = ("random", "genetic", "kdtree")


# ------------------------------------------------------------------------------------ raw space

class RawSpace:
    """Our encoded rows <-> one value per raw feature (numbers as they are, a one-hot group or a
    binary as an integer code): the tabular format DiCE and CFRL expect."""

    def __init__(self, world: TabularWorld) -> None:
        self.schema = world.schema
        self.raws = distance_features(world.schema)
        self.names = [r.name for r in self.raws]
        self.numeric = [r.kind == "numeric" for r in self.raws]
        lo, hi = world.schema.bounds()
        self.lower = np.array([lo[r.columns[0]] if n else 0.0 for r, n in zip(self.raws, self.numeric, strict=True)])
        self.upper = np.array([hi[r.columns[0]] if n else len(r.columns) - 1 if r.kind == "group" else 1.0
                               for r, n in zip(self.raws, self.numeric, strict=True)])
        self.mutability = [world.schema.features[r.columns[0]].mutability for r in self.raws]
        self.n_levels = [len(r.columns) if r.kind == "group" else 2 for r in self.raws]
        feats = [world.schema.features[r.columns[0]] for r in self.raws]
        self.integral = [n and (f.integer or f.kind == "ordinal") for n, f in zip(self.numeric, feats, strict=True)]
        self.D = len(world.schema)

    def to_raw(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, float))
        out = np.zeros((len(X), len(self.raws)))
        for j, r in enumerate(self.raws):
            out[:, j] = X[:, list(r.columns)].argmax(1) if r.kind == "group" else X[:, r.columns[0]]
        return out

    def from_raw(self, R: np.ndarray) -> np.ndarray:
        R = np.atleast_2d(np.asarray(R, float))
        X = np.zeros((len(R), self.D))
        for j, r in enumerate(self.raws):
            if r.kind == "group":
                code = np.clip(np.round(R[:, j]), 0, len(r.columns) - 1).astype(int)
                X[:, list(r.columns)] = np.eye(len(r.columns))[code]
            else:
                X[:, r.columns[0]] = R[:, j]
        return X

    def spec(self) -> dict[str, Any]:
        """What the CFRL script needs to rebuild the encoding (JSON)."""
        return {"names": self.names, "numeric": self.numeric, "kinds": [r.kind for r in self.raws],
                "columns": [list(r.columns) for r in self.raws], "n_columns": self.D,
                "lower": self.lower.tolist(), "upper": self.upper.tolist(), "mutability": self.mutability,
                "n_levels": self.n_levels}


def recourse(x: np.ndarray, cf: np.ndarray | None, method: str, seconds: float, **extra: Any) -> Recourse:
    found = cf is not None and bool(np.isfinite(cf).all())
    return Recourse(steps=(), action_ids=(), final_state=np.asarray(cf, float) if found else None,
                    cost=float("nan"), valid=found, method=method, runtime=seconds,
                    status="ok" if found else "no_recourse", extra=extra)


def as_recourses(x: np.ndarray, rows: np.ndarray, method: str, seconds: float) -> list[Recourse]:
    rows = np.atleast_2d(rows) if len(rows) else np.zeros((0, len(x)))
    out = [recourse(x, r, method, seconds) for r in rows]
    return out or [recourse(x, None, method, seconds)]


# ------------------------------------------------------------------------------------------ DiCE

class DiceModel:
    """DiCE's view of our model: its data frame -> our encoded rows -> P(accept) as two columns."""

    def __init__(self, space: RawSpace, model: Any) -> None:
        self.space, self.model, self.calls, self.rows = space, model, 0, 0

    def encode(self, df: Any) -> np.ndarray:
        df = df[self.space.names]
        R = np.column_stack([df[n].astype(float).to_numpy() for n in self.space.names])
        return self.space.from_raw(R)

    def predict_proba(self, df: Any) -> np.ndarray:
        X = self.encode(df)
        self.calls += 1
        self.rows += len(X)
        p = np.asarray(self.model.predict_proba(X), float).reshape(-1)
        return np.column_stack([1.0 - p, p])

    def predict(self, df: Any) -> np.ndarray:
        return (self.predict_proba(df)[:, 1] > 0.5).astype(int)


class DicePeer:
    """dice-ml with one of its model-agnostic methods (random, genetic, kdtree)."""

    def __init__(self, method: str, world: TabularWorld, space: RawSpace, X_train: np.ndarray, seed: int,
                 timeout: float = 60.0) -> None:
        import dice_ml
        import pandas as pd

        self.method, self.space, self.seed = method, space, seed
        self.timeout = timeout  # seconds per agent (DiCE genetic can loop for minutes on one agent): then no answer
        frame = self.frame(space.to_raw(X_train))
        frame["accepted"] = world.accepts(X_train).astype(int)  # DiCE's outcome: the model's decision
        cont = [n for n, num in zip(space.names, space.numeric, strict=True) if num]
        self.data = dice_ml.Data(dataframe=frame, continuous_features=cont, outcome_name="accepted")
        self.model = DiceModel(space, world.model)
        self.explainer = dice_ml.Dice(self.data, dice_ml.Model(model=self.model, backend="sklearn"), method=method)
        self.vary = [n for n, m in zip(space.names, space.mutability, strict=True) if m != "immutable"]
        self._pd = pd

    def frame(self, R: np.ndarray) -> Any:
        import pandas as pd

        cols = {}
        for j, (n, num) in enumerate(zip(self.space.names, self.space.numeric, strict=True)):
            if num:  # integer columns as ints: DiCE takes its precision (decimals) from the data's dtype
                cols[n] = np.round(R[:, j]).astype(np.int64) if self.space.integral[j] else R[:, j]
            else:
                cols[n] = [str(int(v)) for v in R[:, j]]
        return pd.DataFrame(cols)

    def permitted(self, r: np.ndarray) -> dict[str, list]:
        """Per-agent ranges: monotone numbers between the agent and the bound, monotone binaries' levels."""
        out: dict[str, list] = {}
        for j, (n, num, m) in enumerate(zip(self.space.names, self.space.numeric, self.space.mutability, strict=True)):
            if m not in ("increase", "decrease"):
                continue
            if num:
                lo, hi = (r[j], self.space.upper[j]) if m == "increase" else (self.space.lower[j], r[j])
                out[n] = [float(lo), float(hi)]
            else:
                levels = range(int(r[j]), self.space.n_levels[j]) if m == "increase" else range(0, int(r[j]) + 1)
                out[n] = [str(v) for v in levels]
        return out

    def solve(self, x: np.ndarray, k: int) -> tuple[np.ndarray, dict[str, Any]]:
        r = self.space.to_raw(x)[0]
        query = self.frame(r[None])
        calls0, rows0 = self.model.calls, self.model.rows
        extra: dict[str, Any] = {}
        kw = {"random_seed": self.seed} if self.method == "random" else {}

        def expired(*_: Any) -> None:
            raise TimeoutError(f"no answer within {self.timeout:g} s")

        old = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = self.explainer.generate_counterfactuals(query, total_CFs=k, desired_class="opposite",
                                                              features_to_vary=self.vary,
                                                              permitted_range=self.permitted(r) or None, **kw)
            cf = res.cf_examples_list[0].final_cfs_df
            rows = (self.model.encode(cf) if cf is not None and len(cf) else np.zeros((0, self.space.D)))
        except Exception as err:  # noqa: BLE001 (DiCE raises bare Exceptions when it finds nothing)
            rows, extra["error"] = np.zeros((0, self.space.D)), f"{type(err).__name__}: {str(err)[:200]}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        extra.update(model_calls=self.model.calls - calls0, model_rows=self.model.rows - rows0)
        return rows, extra


# ------------------------------------------------------------------------------------------ CFRL

def alibi_python(venv: Path, make: bool) -> Path | None:
    py = venv / "bin" / "python"
    if not py.exists() and make:
        subprocess.run(["bash", str(HERE / "peers" / "make_alibi_venv.sh"), str(venv)], check=True)
    return py if py.exists() else None


def write_cfrl_inputs(work: Path, world: TabularWorld, space: RawSpace, data: Any, model: str, seed: int,
                      agents: np.ndarray, steps: int, checkpoints: tuple[int, ...] = (), **extra: Any) -> None:
    """The work folder ``benchmarks/peers/alibi_cfrl.py`` reads (``inputs.npz``, ``spec.json``); ``extra``
    goes into the spec (``threads``, ``deadline_seconds``)."""
    work.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(work / "inputs.npz", X_train=data.X_train, y_train=data.y_train, X_test=data.X_test,
                        pred_train=world.accepts(data.X_train).astype(int),
                        pred_test=world.accepts(data.X_test).astype(int),
                        R_train=space.to_raw(data.X_train), R_agents=space.to_raw(agents))
    spec = {"space": space.spec(), "model": model, "params": model_params(model), "seed": seed, "steps": steps,
            "checkpoints": list(checkpoints), **extra}
    (work / "spec.json").write_text(json.dumps(spec, default=list))


def read_cfrl_answers(work: Path, space: RawSpace) -> dict[str, Any]:
    """``answers.json`` of a finished run, its raw rows mapped back to the encoded space (``CF``)."""
    out = json.loads((work / "answers.json").read_text())
    out["CF"] = space.from_raw(np.array(out.pop("R_cf"), float)).tolist() if out.get("R_cf") else []
    for point in out.get("curve", []):
        point["CF"] = space.from_raw(np.array(point.pop("R_cf"), float)).tolist()
    return out


def run_cfrl(py: Path, world: TabularWorld, space: RawSpace, data: Any, model: str, seed: int,
             agents: np.ndarray, steps: int, checkpoints: tuple[int, ...] = (), log: Path | None = None,
             **extra: Any) -> dict[str, Any]:
    """Train alibi's CounterfactualRLTabular in its venv and read its answers (JSON); ``checkpoints``: the
    steps at which every agent is also explained (the learning curve, ``curve``); ``extra`` goes into the
    spec (``num_workers``, ``threads``)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_cfrl_inputs(tmp, world, space, data, model, seed, agents, steps, checkpoints, **extra)
        cmd = [str(py), str(HERE / "peers" / "alibi_cfrl.py"), str(tmp)]
        if log is not None:  # a long run: its progress lines go to a file as they come
            with open(log, "w") as err:
                proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
            tail = Path(log).read_text()[-2000:]
        else:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            tail = proc.stderr[-2000:]
        if proc.returncode != 0:
            return {"error": tail}
        return read_cfrl_answers(tmp, space)


# ------------------------------------------------------------------------------------------ cell

def timed_solve(solver: Any, world: TabularWorld, x: np.ndarray) -> tuple[list[Recourse], float, float]:
    t, c = time.perf_counter(), time.process_time()
    out = solver.solve(world, x)
    return out, time.perf_counter() - t, time.process_time() - c


def label_generator(world: TabularWorld, X_train: np.ndarray, n: int, seed: int, mace: MACE,
                    budget: float = float("inf")) -> tuple[Any, dict]:
    """Our amortized generator (``nearest_cfe``: MACE's answers on rejected training rows, transplanted,
    projected, verified and polished), with its training time (MACE labels + fit)."""
    from learners.tabular import TabularLabels, build_tabular_generator

    pool = sample(world, X_train, n, seed + 1)
    t0 = time.perf_counter()
    X, CF, dist = [], [], []
    for x in pool:
        if time.perf_counter() - t0 > budget:
            break
        r = mace.solve(world, x)[0]
        if r.found and r.final_state is not None:
            X.append(x)
            CF.append(np.asarray(r.final_state, float))
            dist.append(r.cost)
    label_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    gen = build_tabular_generator("nearest_cfe").fit(world, TabularLabels(np.array(X), np.array(CF), np.array(dist)),
                                                     seed=seed)
    return gen, {"label_agents": len(pool), "labelled": len(X), "label_budget": budget, "label_seconds": label_s,
                 "fit_seconds": time.perf_counter() - t1, "train_seconds": label_s + time.perf_counter() - t1}


def run_cell(dataset: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    b = build(dataset, model, seed=args.seed)
    world, data = b.world, b.data
    D = data.X_train
    agents = sample(world, data.X_test, args.agents, args.seed)
    n_div = min(args.diverse_agents, len(agents))
    space = RawSpace(world)
    counted = Counted(world.model)
    cworld = TabularWorld(world.name, world.schema, counted, world.encoder)
    scorer1 = CounterfactualScorer(n_diverse=1, plaf=Plaf()).fit(world, D)
    scorer5 = CounterfactualScorer(n_diverse=5, plaf=Plaf()).fit(world, D)
    rows: dict[str, list[dict]] = {}
    div: dict[str, list[dict]] = {}
    cell: dict[str, Any] = {"dataset": dataset, "model": model, "seed": args.seed, "agents": len(agents),
                            "diverse_agents": n_div, "test_accuracy": b.metrics.get("test_accuracy"),
                            "training": {}, "errors": {}}

    def log(*a: Any) -> None:
        print(f"[{dataset}/{model}]", *a, flush=True)

    # ours: MACE (certified, and its 5 successive diverse answers), GeCo, MD-PSO, the generator
    mace = MACE(norm="one", rel_tol=1e-4, epsilon=1e-7, n_diverse=1, time_limit=args.mace_time_limit)
    mace5 = MACE(norm="one", rel_tol=1e-3, epsilon=1e-7, n_diverse=5, time_limit=args.mace_time_limit)
    geco = GeCo(plaf=Plaf(), n_diverse=1).fit(world, D)
    pso = MDPSO(n_diverse=5, seed=args.seed).fit(world, D)
    with warming_up("MACE (k = 1, 5), GeCo, MD-PSO on one agent"):
        for solver in (mace, mace5, geco, pso):
            solver.solve(world, agents[0])
    for name, solver, scorer, n, sink in (("mace", mace, scorer1, len(agents), rows),
                                          ("geco", geco, scorer1, len(agents), rows),
                                          ("md_pso", pso, scorer5, len(agents), rows),
                                          ("mace", mace5, scorer5, n_div, div),
                                          ("md_pso", pso, scorer5, n_div, div)):
        if name == "md_pso" and sink is div:  # the same MD-PSO answers, scored for their set
            div[name] = [r for r in rows["md_pso"][:n_div]]
            continue
        out_rows = []
        for x in agents[:n]:
            out, sec, cpu = timed_solve(solver, world, x)
            calls = 0 if name == "mace" else None  # MACE reads the white box: no model calls
            out_rows.append(scorer.score(x, out, seconds=sec, cpu_seconds=cpu, model_calls=calls))
        sink[name] = out_rows
        log(name, "k=5" if sink is div else "", summarize(out_rows)["seconds"])
    # the generator: trained on MACE labels of rejected training rows; answers one agent per call
    gen, cell["training"]["generator"] = label_generator(world, D, args.label_agents, args.seed, mace,
                                                          args.label_budget)
    with warming_up("the generator on two agents"):
        gen.recommend(cworld, agents[:2])
    g_rows, g_div = [], []
    for x in agents:
        c0, r0 = counted.calls, counted.rows
        t, c = time.perf_counter(), time.process_time()
        rec = gen.recommend(cworld, x[None], n_alternatives=4)
        sec, cpu = time.perf_counter() - t, time.process_time() - c
        calls = counted.calls - c0
        cf = rec.CF[0] if rec.found[0] else None
        g_rows.append(scorer1.score(x, [recourse(x, cf, "generator", sec)], seconds=sec, cpu_seconds=cpu,
                                    model_calls=calls))
        g_rows[-1]["model_rows"] = counted.rows - r0
        alts = [a for a in (rec.alternatives[0] if rec.alternatives is not None else []) if np.isfinite(a).all()]
        g_div.append(scorer5.score(x, [recourse(x, cf, "generator", sec)] + [recourse(x, a, "generator", sec)
                                                                             for a in alts],
                                   seconds=sec, cpu_seconds=cpu, model_calls=calls))
    rows["generator"], div["generator"] = g_rows, g_div[:n_div]
    log("generator", summarize(g_rows)["seconds"])

    # peers: DiCE (k = 1 for distance and time, k = 5 for the set), CFRL
    for method in DICE_METHODS:
        name = f"dice_{method}"
        if name not in args.peers:
            continue
        try:
            t0 = time.perf_counter()
            peer = DicePeer(method, world, space, D, args.seed, timeout=args.call_timeout)
            cell["training"][name] = {"setup_seconds": time.perf_counter() - t0}
        except ImportError as err:
            cell["errors"][name] = f"not installed: {err}"
            continue
        with warming_up(f"{name} on one agent"):
            peer.solve(agents[0], 1)
        for k, n, sink, scorer in ((1, len(agents), rows, scorer1), (5, n_div, div, scorer5)):
            out_rows, errs = [], []
            started = time.perf_counter()
            for x in agents[:n]:
                if time.perf_counter() - started > args.method_budget:
                    cell["errors"][f"{name}_k{k}_budget"] = (f"stopped after {len(out_rows)} of {n} agents: "
                                                            f"--method-budget {args.method_budget} s")
                    break
                t, c = time.perf_counter(), time.process_time()
                got, extra = peer.solve(x, k)
                sec, cpu = time.perf_counter() - t, time.process_time() - c
                m = scorer.score(x, as_recourses(x, got, name, sec), seconds=sec, cpu_seconds=cpu,
                                 model_calls=extra["model_calls"])
                m["model_rows"] = extra["model_rows"]
                out_rows.append(m)
                if "error" in extra:
                    errs.append(extra["error"])
            sink[name] = out_rows
            if errs:
                cell["errors"][f"{name}_k{k}"] = {"agents": len(errs), "first": errs[0]}
            log(name, f"k={k}", summarize(out_rows)["seconds"])
    cell["records"], cell["diverse_records"] = rows, div
    if "cfrl" in args.peers:
        add_cfrl(cell, world, data, agents, args)
    finish(cell)
    cell["load_average"] = os.getloadavg()[0]
    cell["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return cell


def add_cfrl(cell: dict[str, Any], world: TabularWorld, data: Any, agents: np.ndarray,
             args: argparse.Namespace) -> dict[str, Any]:
    """CFRL's answers for the cell's agents (run in the alibi venv), scored like ours; an error is recorded."""
    space = RawSpace(world)
    scorer1 = CounterfactualScorer(n_diverse=1, plaf=Plaf()).fit(world, data.X_train)
    model = cell["model"]
    rows = cell["records"]
    py = alibi_python(Path(args.alibi_venv), make=not args.no_make_venv)
    if py is None:
        cell["errors"]["cfrl"] = f"no alibi venv at {args.alibi_venv}"
        return cell
    cell["errors"].pop("cfrl", None)
    res = run_cfrl(py, world, space, data, model, args.seed, agents, args.cfrl_steps)
    if "error" in res:
        cell["errors"]["cfrl"] = res["error"]
        return cell
    cell["training"]["cfrl"] = {k: res[k] for k in ("train_seconds", "ae_seconds", "rl_seconds", "steps",
                                                    "disagreements", "checked_rows", "versions",
                                                    "train_model_calls")}
    c_rows = []
    for i, x in enumerate(agents):
        cf = np.asarray(res["CF"][i], float)
        sec = res["seconds"][i]
        c_rows.append(scorer1.score(x, [recourse(x, cf, "cfrl", sec)], seconds=sec,
                                    cpu_seconds=res["cpu_seconds"][i], model_calls=res["model_calls"][i]))
    rows["cfrl"] = c_rows
    print(f"[{cell['dataset']}/{model}] cfrl", summarize(c_rows)["seconds"], "disagreements", res["disagreements"],
          flush=True)
    return cell


def served(gen: list[dict], geco: list[dict]) -> list[dict]:
    """Our generator as the server runs it: its answer, else GeCo's (time and calls of both)."""
    out = []
    for g, c in zip(gen, geco, strict=True):
        if g["found"]:
            out.append(g)
            continue
        r = dict(c)
        for key in ("seconds", "cpu_seconds", "model_calls"):
            r[key] = (g.get(key) or 0) + (c.get(key) or 0)
        out.append(r)
    return out


def finish(cell: dict[str, Any]) -> dict[str, Any]:
    """Summaries, ratios to MACE and dominance from a cell's records (recomputed whenever a report is made)."""
    rows = dict(cell["records"])
    if "generator" in rows and "geco" in rows:
        rows["served"] = served(rows["generator"], rows["geco"])
    ref = [m["distance"] for m in rows["mace"]]
    # agents are asked in order: a method stopped by its time budget answered the first len(r) of them
    cell["summary"] = {n: {**summarize(r), **ratio_summary([m["distance"] for m in r], ref[:len(r)]),
                           "accepted_ratio": ratio_summary([m["distance_accepted"] for m in r], ref[:len(r)])}
                       for n, r in rows.items()}
    cell["diversity"] = {n: summarize(r) for n, r in cell["diverse_records"].items()}
    cell["dominance"] = dominance(cell["summary"])
    return cell


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["adult", "german", "compas", "credit"])
    p.add_argument("--models", nargs="+", default=["forest", "mlp"])
    p.add_argument("--agents", type=int, default=50, help="rejected test agents per cell")
    p.add_argument("--diverse-agents", type=int, default=5, help="of those, asked for k = 5 diverse answers")
    p.add_argument("--label-agents", type=int, default=150, help="rejected training rows MACE labels for our generator")
    p.add_argument("--peers", nargs="*", default=list(PEERS), choices=list(PEERS), help="none: ours only")
    p.add_argument("--cfrl-steps", type=int, default=2000, help="CFRL's RL training steps (alibi's default: 100,000)")
    p.add_argument("--mace-time-limit", type=float, default=60.0)
    p.add_argument("--method-budget", type=float, default=100.0,
                   help="seconds per peer method and k per cell; agents left after it are not asked (reported)")
    p.add_argument("--call-timeout", type=float, default=30.0,
                   help="seconds per DiCE call; past it the agent gets no answer (counted, not valid)")
    p.add_argument("--label-budget", type=float, default=150.0,
                   help="seconds of MACE labelling for our generator per cell (its training time)")
    p.add_argument("--alibi-venv", default=str(HERE / "peers" / ".alibi-venv"))
    p.add_argument("--no-make-venv", action="store_true", help="do not create the alibi venv when it is missing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="redo finished cells")
    p.add_argument("--out", default="benchmarks/results/peers")
    args = p.parse_args(argv)
    out = Path(args.out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    tag = f"a{args.agents}-d{args.diverse_agents}-l{args.label_agents}-c{args.cfrl_steps}-s{args.seed}"
    cells = []
    for dataset in args.datasets:
        for model in args.models:
            path = out / "cells" / f"{dataset}-{model}-{tag}.json"
            if path.exists() and not args.force:
                cell = json.loads(path.read_text())
                if "cfrl" in args.peers and "cfrl" not in cell["records"] and not args.no_make_venv:
                    b = build(dataset, model, seed=args.seed)  # a cell finished without CFRL: add it
                    add_cfrl(cell, b.world, b.data, sample(b.world, b.data.X_test, args.agents, args.seed), args)
                    save(finish(cell), path)
                cells.append(finish(cell))
                continue
            cells.append(save(run_cell(dataset, model, args), path))
    command = "python benchmarks/peers.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(cells, command.strip())
    Path(f"{out}.md").write_text(text)
    Path(f"{out}.json").write_text(json.dumps({"command": command.strip(), "cells": [
        {k: v for k, v in c.items() if k not in ("records", "diverse_records")} for c in cells]},
        indent=1, default=float))
    print(text)


if __name__ == "__main__":
    main()
