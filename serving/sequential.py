"""Serve a sequential run (``runs/sequential_adult``): raw records in, ordered actions out.

A sequential run (``train.py configs/sequential_adult.yaml``) holds policies trained in a CSCF
world (``envs.sequential.SequentialWorld``): actions with values, consequences and discounted
costs, an MLP black box. :class:`SequentialService` answers a raw record with the **ordered
actions** a person takes: each with its value, its cost (c = b · g, priced by the world in
order) and the record after the step, in raw units; the total cost; ``verified`` (the world
rolls the sequence out from the request's record: every pre/post condition holds, the model
accepts the end state, no immutable feature changed and no increase-only one decreased).

The policy answers first (batched rollout); an unverified or missing answer goes to the BRKGA
sequencer (``solvers.sequential.brkga``) on the worker thread of the tabular fallbacks, within
the budget; past it ``status: unknown`` and the sequencer finishes in the background into the
cache (:class:`serving.fallback.BackgroundCache`). The sequencer is a heuristic: it never says
``no_recourse`` (an empty front is ``unknown``), and ``optimal`` is always null.

At start the policy's own copy of the world must have the run's world fingerprint (the world of
its labels), and the data set's encoder (``data_gen.loaders.load_data``) must match the world's
schema, or the run is refused.
"""


import json
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, Field

from serving.fallback import BackgroundCache
from serving.records import RecordCodec, RecordError
from serving.service import InputError, ServiceError
from serving.tabular import _SOLVER_THREAD, CACHE_SIZE
from serving.tabular_schemas import Change

log = logging.getLogger("recourse_gym.serve")


def is_sequential_run(run_dir: str | Path) -> bool:
    """Whether ``run_dir/config.yaml`` names a sequential ``world`` (a CSCF run)."""
    path = Path(run_dir) / "config.yaml"
    try:
        cfg = yaml.safe_load(path.read_text()) if path.exists() else None
    except yaml.YAMLError:
        return False
    return isinstance(cfg, dict) and isinstance(cfg.get("world"), str) and "policies" in cfg


@dataclass
class SeqAnswer:
    status: str  # ok | already_positive | unknown
    actions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    method: str = "fallback"
    kind: str = "fallback"  # policy | sequencer | model | fallback
    verified: bool = False
    budget_exceeded: bool = False


class SequentialService:
    """One policy of a sequential run, its world, the sequencer fallback, counters and provenance."""

    kind = "sequential"

    def __init__(self, run_dir: str | Path, model: str | None = None, fallback_budget_s: float | None = 0.05,
                 max_batch: int = 10_000, *, world: Any = None, policies: dict[str, Any] | None = None,
                 encoder: Any = None, config: dict[str, Any] | None = None, beam_width: int | None = None):
        if max_batch < 1:
            raise ServiceError(f"max_batch: must be >= 1, got {max_batch}")
        if beam_width is not None and beam_width < 1:
            raise ServiceError(f"beam_width: must be >= 1, got {beam_width}")
        self.beam_width = beam_width  # None: the policy's own (its params.beam_width; 1 = raw rollout)
        self.run_dir = Path(run_dir)
        self.fallback_budget_s = None if fallback_budget_s is None or math.isinf(fallback_budget_s) else fallback_budget_s
        self.max_batch = max_batch
        if world is None:
            world, policies, encoder, config = self._load_run(model)
        self.world, self.policies, self.config = world, dict(policies or {}), dict(config or {})
        if not self.policies:
            raise ServiceError(f"model: run {self.run_dir.name} has no trained policy")
        name = model if model is not None else next(iter(self.policies))
        if name not in self.policies:
            raise ServiceError(f"model: {name!r} is not a policy of this run; known: {sorted(self.policies)}")
        self.model_name, self.policy = name, self.policies[name]
        pw = getattr(self.policy, "world_", None)
        if pw is not None and pw.fingerprint() != world.fingerprint():
            raise ServiceError(f"world: policy {name!r} was trained on world {pw.fingerprint()[:16]} but the run's "
                               f"world is {world.fingerprint()[:16]}; retrain, or restore the run's labels")
        if encoder.schema != world.schema:
            raise ServiceError("world: the data set's encoder does not match the world's schema")
        self.codec = RecordCodec(encoder)
        self.jobs = BackgroundCache(_SOLVER_THREAD, CACHE_SIZE)
        self.counters = {"requests": 0, "records": 0, "policy": 0, "sequencer": 0, "unknown": 0,
                         "already_positive": 0, "verified": 0, "policy_invalid": 0, "rejected": 0}
        self._lock = threading.Lock()
        self._futures: set[Any] = set()
        self.started = time.time()
        log.info("serving sequential run %s: world %s, policy %s, fallback brkga", self.run_dir.name, world.name, name)

    def _load_run(self, model: str | None) -> tuple[Any, dict[str, Any], Any, dict[str, Any]]:
        """World, the served policy (only that one is loaded; the others are listed), encoder, config."""
        import learners.registry  # noqa: F401  (fills the generator registry)
        from data_gen.config import parse_model
        from data_gen.loaders import load_data
        from envs.sequential import SequentialWorld
        from evaluation.sequential_experiment import SequentialExperimentConfig, run_labels
        from learners.base import Generator

        try:
            cfg = parse_model(SequentialExperimentConfig, yaml.safe_load((self.run_dir / "config.yaml").read_text()),
                              str(self.run_dir / "config.yaml"))
            info = run_labels(self.run_dir)
            world = SequentialWorld.load(Path(info["path"]) / "world.json")
            seed = cfg.seeds[0]
            trained = [s.label for s in cfg.policies
                       if (self.run_dir / "models" / s.label / f"seed{seed}" / "config.json").exists()]
            if not trained:
                raise ServiceError(f"model: run {self.run_dir.name} has no trained policy (run train.py first)")
            name = model if model is not None else trained[0]
            if name not in trained:
                raise ServiceError(f"model: {name!r} is not a trained policy of this run; known: {trained}")
            self.trained = trained
            try:
                policies = {name: Generator.load(self.run_dir / "models" / name / f"seed{seed}")}
            except Exception as err:  # weights of another code version, a missing file: not servable
                raise ServiceError(f"model: cannot load policy {name!r} ({type(err).__name__}: "
                                   f"{str(err).splitlines()[0][:200]}); retrain it or serve another (--model)") from None
            encoder = load_data(world.meta.get("dataset", cfg.world), seed=int(world.meta.get("seed", 0))).encoder
        except ServiceError:
            raise
        except (ValueError, OSError, KeyError) as err:
            raise ServiceError(f"run: {err}") from None
        return world, policies, encoder, json.loads(cfg.model_dump_json())

    # ------------------------------------------------------------------ answers
    def parse(self, records: Any, field: str = "records", single: bool = False) -> np.ndarray:
        try:
            return self.codec.encode(records, field, single)
        except RecordError as err:
            raise InputError(str(err)) from None

    def _check(self, X: np.ndarray, S: np.ndarray, V: np.ndarray) -> np.ndarray:
        """Per row: the sequence holds every condition, ends accepted, breaks no mutability rule.
        The domain is the world's (its actions' grids and post-conditions, checked by the
        rollout), not the data set's observed range: CSCF lets a German loan run 1..119 months
        where the data has 4..72."""
        r = self.world.rollout(X, S, V)
        ok = r.ok & self.world.accepts(r.final)
        ok &= np.array([b is None for b in self.codec.violations(X, r.final, integral=False, bounds=False)])
        return ok

    def first_pass(self, X: np.ndarray) -> tuple[list[SeqAnswer], np.ndarray]:
        B = len(X)
        answers = [SeqAnswer("unknown") for _ in range(B)]
        acc = self.world.accepts(X)
        for i in np.flatnonzero(acc):
            answers[i] = SeqAnswer("already_positive", method="model", kind="model", verified=True)
        todo = np.flatnonzero(~acc)
        if not len(todo):
            return answers, todo
        try:
            pred = self.policy.predict_sequences(X[todo], beam_width=self.beam_width)
            S, V = np.asarray(pred.sets, np.int64), np.asarray(pred.values, float)
            ok = self._check(X[todo], S, V)
        except Exception:
            log.exception("policy %s failed on %d records; using the sequencer", self.model_name, len(todo))
            ok = np.zeros(len(todo), bool)
        for r in np.flatnonzero(ok):
            keep = S[r] >= 0
            answers[todo[r]] = SeqAnswer("ok", S[r][keep], V[r][keep], self.model_name, "policy", True)
        with self._lock:
            self.counters["policy_invalid"] += int((~ok).sum())
        return answers, todo[~ok]

    def _sequence(self, x: np.ndarray) -> SeqAnswer:
        """The BRKGA sequencer's cheapest feasible sequence (worker thread)."""
        from solvers.sequential.brkga import BRKGASequencer

        gens = int(self.config.get("sequencer_generations", 30))
        front = BRKGASequencer(n_generations=gens, seed=0).solve(self.world, x)
        best = front[0]
        if best.status != "ok" or not best.valid:
            return SeqAnswer("unknown", method="brkga", kind="fallback")
        S = np.array([list(best.action_ids)], np.int64)
        V = np.array([[np.nan if v is None else float(v) for _, v in best.steps]], float)
        if not len(best.action_ids):
            return SeqAnswer("already_positive", method="model", kind="model", verified=True)
        ok = bool(self._check(x[None], S, V)[0])
        return SeqAnswer("ok" if ok else "unknown", S[0], V[0], "brkga", "sequencer" if ok else "fallback", ok)

    def complete(self, X: np.ndarray, answers: list[SeqAnswer], bad: np.ndarray, t_end: float) -> None:
        jobs = []
        for i in bad:
            key = ("seq", X[i].tobytes())
            hit = self.jobs.get([key])[0]
            if hit is None:
                hit = self.jobs.submit([key], self._sequence, X[i])
                with self._lock:
                    self._futures.add(hit)
                hit.add_done_callback(lambda f: self._futures.discard(f))
            jobs.append((i, hit))
        for i, job in jobs:
            if isinstance(job, SeqAnswer):
                answers[i] = job
                continue
            done, ans = self.jobs.wait(job, t_end, drop_queued=False)
            answers[i] = ans if done and ans is not None else SeqAnswer("unknown", budget_exceeded=True)

    def recommend(self, X: np.ndarray, budget_s: float | None = -1.0) -> list[SeqAnswer]:
        budget = self.fallback_budget_s if budget_s == -1.0 else budget_s
        t_end = math.inf if budget is None else time.perf_counter() + budget
        answers, bad = self.first_pass(X)
        self.complete(X, answers, bad, t_end)
        return answers

    def close(self) -> None:
        for f in list(self._futures):
            f.cancel()

    def count(self, answers: list[SeqAnswer]) -> None:
        with self._lock:
            c = self.counters
            c["requests"] += 1
            c["records"] += len(answers)
            for a in answers:
                key = a.status if a.status in ("already_positive", "unknown") else a.kind
                if key in c:
                    c[key] += 1
                c["verified"] += int(a.verified)

    def records(self, X: np.ndarray, answers: list[SeqAnswer], t0: float | None = None) -> list[dict[str, Any]]:
        out = []
        for x, a in zip(X, answers, strict=True):
            steps, total, changes = [], None, []
            if a.status == "ok" and len(a.actions):
                r = self.world.rollout(x[None], a.actions[None], a.values[None], keep_states=True)
                states = r.states[0]
                for t, (act, v) in enumerate(zip(a.actions, a.values, strict=True)):
                    action = self.world.actions[int(act)]
                    steps.append({"action": action.name, "value": None if np.isnan(v) else float(v),
                                  "cost": float(r.step_costs[0, t]),
                                  "changes": self.codec.changes(states[t], states[t + 1]),
                                  "state": self.codec.decode(states[t + 1])})
                total = float(r.cost[0])
                changes = self.codec.changes(x, r.final[0])
            out.append({"status": a.status, "steps": steps, "changes": changes,
                        "total_cost": 0.0 if a.status == "already_positive" else total,
                        "verified": bool(a.verified), "method": a.method, "optimal": None,
                        "budget_exceeded": a.budget_exceeded,
                        "latency_ms": None if t0 is None else (time.perf_counter() - t0) * 1e3})
        return out

    def recommend_records(self, records: list[dict[str, Any]], field: str = "records") -> list[dict[str, Any]]:
        t0 = time.perf_counter()
        X = self.parse(records, field)
        out: list[dict[str, Any]] = []
        for s in range(0, len(X), self.max_batch):
            ans = self.recommend(X[s: s + self.max_batch])
            self.count(ans)
            out += self.records(X[s: s + self.max_batch], ans, t0)
        return out

    def describe(self) -> dict[str, Any]:
        with self._lock:
            c = dict(self.counters)
        need = c["records"] - c["already_positive"]
        rates = {k: (c[k] / need if need else 0.0) for k in ("policy", "sequencer", "unknown")}
        return {"kind": "sequential", "run": str(self.config.get("name", self.run_dir.name)),
                "run_dir": self.run_dir.resolve().name, "world": self.world.name,
                "world_fingerprint": self.world.fingerprint(), "policy": self.model_name,
                "policies": list(getattr(self, "trained", self.policies)), "actions": self.world.action_names,
                "fallback": {"chain": ["brkga"],
                             "budget_ms": None if self.fallback_budget_s is None else self.fallback_budget_s * 1e3},
                "max_batch": self.max_batch, "uptime_s": time.time() - self.started, "counters": c, "rates": rates}


# ---------------------------------------------------------------------------------------- HTTP
class Step(BaseModel):
    """One action of the sequence, in the order to take it."""

    action: str
    value: float | None = Field(description="the action's value (null: an action without one)")
    cost: float = Field(description="its cost c = b · g, priced in order (consequential discounts)")
    changes: list[Change] = Field(description="what this step changes, in raw units")
    state: dict[str, str | int | float] = Field(description="the record after the step, in raw units")


class SequentialRecommendation(BaseModel):
    status: Literal["ok", "already_positive", "unknown"] = Field(
        description="ok | already_positive | unknown (not finished within the budget: ask again)")
    steps: list[Step]
    changes: list[Change] = Field(description="the net change from the record to the end state")
    total_cost: float | None
    verified: bool = Field(description="rolled out from the request's record: every condition held, the model "
                                       "accepts the end state, no immutable/monotone rule broken")
    method: str = Field(description="the policy's name, brkga, model (already accepted) or fallback")
    optimal: None = Field(description="never certified (the sequencer is a heuristic)")
    budget_exceeded: bool
    latency_ms: float | None


class SequentialBatchResponse(BaseModel):
    results: list[SequentialRecommendation]
    counts: dict[str, int]


def create_sequential_app(run_dir: str | Path, model: str | None = None, fallback_budget_s: float | None = 0.05,
                          max_batch: int = 10_000, *, service: SequentialService | None = None,
                          beam_width: int | None = None, jobs_dir: str | Path | None = None, keys: Any = None,
                          rate_limit: float = 50.0) -> Any:
    """The FastAPI app serving one policy of a sequential run (FastAPI: the ``serve`` extra); ``jobs_dir``:
    where batch jobs are kept so that a restart finishes them (None: in memory only)."""
    from fastapi import FastAPI
    from starlette.concurrency import run_in_threadpool

    from serving.app import add_health_and_model, freeze_startup_heap, install_handlers, shutdown
    from serving.guard import Guard
    from serving.jobs import install_batch_routes
    from serving.observability import operate
    from serving.tabular_schemas import TABULAR_ERRORS, record_models, to_record

    svc = service or SequentialService(run_dir, model, fallback_budget_s, max_batch, beam_width=beam_width)
    Request, Batch = record_models(svc.codec, svc.max_batch, 0)
    app = FastAPI(title="recourse-gym recommendations (sequential)", version="1",
                  description=f"Ordered actions for raw records of the {svc.world.name} world: policy "
                              f"'{svc.model_name}', verified by rollout, the BRKGA sequencer as the fallback. "
                              f"Actions: {', '.join(svc.world.action_names)}.")
    app.add_middleware(Guard, svc=svc, limit=1_000_000 + svc.max_batch * (48 * len(svc.codec.names) + 64))
    app.state.service = svc
    install_handlers(app, svc.max_batch, "records")

    @app.post("/recommend", response_model=SequentialRecommendation, summary="Ordered actions for one raw record",
              responses=TABULAR_ERRORS)
    async def recommend(req: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        t0 = time.perf_counter()
        X = svc.parse([to_record(req)], single=True)
        answers, bad = svc.first_pass(X)
        if len(bad):
            t_end = time.perf_counter() + (math.inf if svc.fallback_budget_s is None else svc.fallback_budget_s)
            await run_in_threadpool(svc.complete, X, answers, bad, t_end)
        svc.count(answers)
        return svc.records(X, answers, t0)[0]

    jobs = install_batch_routes(app, svc, Batch, SequentialRecommendation, SequentialBatchResponse, TABULAR_ERRORS,
                                jobs_dir=jobs_dir)
    shutdown(app, jobs, svc if service is None else None)

    add_health_and_model(app, svc, what="run")
    from serving.page import add_page  # GET / for people, GET /schema and /example

    add_page(app, svc)
    operate(app, svc, jobs, keys=keys, rate_limit=rate_limit)  # /metrics, request ids, keys
    freeze_startup_heap()
    return app
