"""Serve a trained generator: instant recommendations, verified against the world, with an exact
fallback (the logic behind ``serve.py``).

:class:`RecommendationService` loads a run directory -- the world from the dataset's
``world.json`` (refused when its fingerprint differs from the one recorded at training) and one
generator with :meth:`Generator.load` (``weights_only`` state dicts / ``allow_pickle=False``
arrays, never a pickle) -- and answers batches of agents:

1. an agent the classifier already accepts gets an empty answer, status ``already_positive``;
2. an agent whose deficit no allowed action set can cover gets ``no_recourse`` (an exact check:
   the union of the allowed actions misses a needed capability);
3. every other agent gets the generator's set, checked with ``world.rollout`` (accepted at the
   end, every action allowed to the agent's group, none twice) and priced there;
4. an invalid generated set is replaced by the exact branch and bound (``FastSetCover``). The
   solver runs on one background thread, chunk by chunk, and the request waits at most the
   fallback budget for it; agents it has not reached by then get status ``unknown`` with
   ``budget_exceeded`` set, instead of a hung request. The solver's unfinished chunk completes
   in the background and its answers are cached, so a retry is usually instant.

:func:`create_app` wraps the service in a FastAPI app (``/recommend``, ``/recommend/batch``,
``/health``, ``/model``) and :func:`recommend_file` runs the same code path over a CSV or Parquet
file of agents.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from envs.capability import CapabilityWorld
from learners.base import Generator
from learners.config import parse_config
from learners.experiment import model_dir
from solvers.setcover_fast import FastSetCover

log = logging.getLogger("recourse_gym.serve")

Status = Literal["ok", "no_recourse", "already_positive", "unknown"]
WORLD_METHOD = "world"  # answered by the world model alone (already accepted, or provably no cover)
MODEL_SUFFIXES = (".pt", ".npz")  # weight files hashed into the model fingerprint (besides config.json)


class ServiceError(ValueError):
    """The run directory cannot be served (missing files, changed world, unusable model)."""


class InputError(ValueError):
    """A request or input file is invalid; the message starts with the offending field."""


# ---------------------------------------------------------------------------- the exact fallback
# numba's parallel kernels must not be entered from two threads at once (the workqueue threading
# layer aborts), so every fallback solve in the process goes through this single thread.
_SOLVER_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="setcover-fallback")
FALLBACK_CHUNK = 256  # agents per solver call: the unit of progress within the budget
CACHE_SIZE = 100_000  # (group, deficit) patterns whose exact answer is kept


class _FallbackSolver:
    """Exact set cover for invalid generated answers, within a time budget, with an LRU cache."""

    def __init__(self, world: CapabilityWorld):
        self.world = world
        self.solver = FastSetCover()
        self.cache: OrderedDict[bytes, tuple[tuple[int, ...], bool]] = OrderedDict()
        self.lock = threading.Lock()

    def warm_up(self) -> None:
        """Compile the branch and bound now rather than in the first request's budget."""
        g = None if self.world.n_groups == 1 else np.zeros(1, dtype=np.int64)
        _SOLVER_THREAD.submit(self.solver.label_batch, self.world, np.zeros((1, self.world.n_features), np.uint8),
                              g).result()

    def _keys(self, X: np.ndarray, groups: np.ndarray | None) -> list[bytes]:
        packed = np.packbits(self.world.deficits(X, groups), axis=1)
        g = np.zeros(len(X), np.int64) if groups is None else groups
        return [int(gi).to_bytes(4, "little") + row.tobytes() for gi, row in zip(g, packed, strict=True)]

    def _store(self, keys: list[bytes], fut: Future) -> None:
        """Cache a finished chunk (also runs when the request that asked for it gave up)."""
        if fut.cancelled() or fut.exception() is not None:
            return
        labels = fut.result()
        with self.lock:
            for i, key in enumerate(keys):
                self.cache[key] = (tuple(int(a) for a in labels.actions[i] if a >= 0), bool(labels.has_cover[i]))
                self.cache.move_to_end(key)
            while len(self.cache) > CACHE_SIZE:
                self.cache.popitem(last=False)

    def solve(self, X: np.ndarray, groups: np.ndarray | None, budget_s: float | None
              ) -> list[tuple[tuple[int, ...], bool] | None]:
        """Per agent: (optimal set, has cover), or None where the budget ran out first."""
        t_end = math.inf if budget_s is None else time.perf_counter() + budget_s
        keys = self._keys(X, groups)
        with self.lock:
            out = [self.cache.get(k) for k in keys]
        todo = [i for i, r in enumerate(out) if r is None]
        for start in range(0, len(todo), FALLBACK_CHUNK):
            left = t_end - time.perf_counter()
            if left <= 0:
                break
            idx = np.array(todo[start: start + FALLBACK_CHUNK])
            chunk_keys = [keys[i] for i in idx]
            fut = _SOLVER_THREAD.submit(self.solver.label_batch, self.world, X[idx],
                                        None if groups is None else groups[idx])
            fut.add_done_callback(lambda f, k=chunk_keys: self._store(k, f))
            try:
                labels = fut.result(timeout=None if math.isinf(left) else left)
            except FutureTimeout:
                fut.cancel()  # still queued: dropped; already running: finishes into the cache
                break
            except Exception:  # a solver failure leaves these agents "unknown" rather than failing the request
                log.exception("fallback solver failed on %d agents", len(idx))
                break
            for j, i in enumerate(idx):
                out[i] = (tuple(int(a) for a in labels.actions[j] if a >= 0), bool(labels.has_cover[j]))
        return out


# ---------------------------------------------------------------------------- answers
@dataclass
class Answers:
    """Recommendations for a batch (arrays, one row per agent)."""

    status: np.ndarray  # (B,) object: ok / no_recourse / already_positive / unknown
    sets: list[tuple[int, ...]]  # action ids in the order they are taken
    cost: np.ndarray  # (B,) float, NaN where there is no recommendation
    confidence: np.ndarray  # (B,) float, NaN where not given by the generator
    verified: np.ndarray  # (B,) bool
    method: np.ndarray  # (B,) object
    optimal: list[bool | None]  # True: the exact solver's optimum; None: not certified
    budget_exceeded: np.ndarray  # (B,) bool


@dataclass
class Pending:
    """A batch after the first pass: answers so far and the agents that still need the fallback."""

    answers: Answers
    X: np.ndarray
    groups: np.ndarray | None
    generated: int  # agents the generator answered
    bad: np.ndarray  # indices whose generated answer was invalid


def _num(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


# ---------------------------------------------------------------------------- the service
class RecommendationService:
    """One served generator of a run directory, its world and the exact fallback."""

    def __init__(self, run_dir: str | Path, model: str | None = None, rule: str = "all", seed: int = 0,
                 fallback_budget_s: float | None = 0.05, max_batch: int = 10_000):
        if max_batch < 1:
            raise ServiceError(f"max_batch: must be >= 1, got {max_batch}")
        if fallback_budget_s is not None and not fallback_budget_s >= 0:
            raise ServiceError(f"fallback_budget_s: must be >= 0 or None (no limit), got {fallback_budget_s}")
        self.run_dir = Path(run_dir)
        self.rule, self.seed = rule, seed
        self.fallback_budget_s = None if fallback_budget_s is None or math.isinf(fallback_budget_s) else fallback_budget_s
        self.max_batch = max_batch
        self._load_run(model)
        self._load_model()
        w = self.world
        self.reach = (self._allowed_by_group().astype(np.int64) @ w.actions.astype(np.int64)) > 0  # (G, n)
        self.action_items = [{"id": a, "name": w.action_names[a],
                              "effects": [w.feature_names[j] for j in np.flatnonzero(w.actions[a])]}
                             for a in range(w.n_actions)]
        self.fallback = _FallbackSolver(w)
        self.fallback.warm_up()
        self.counters = {"requests": 0, "agents": 0, "generated": 0, "verified": 0, "fallbacks": 0,
                         "budget_exceeded": 0, "already_positive": 0, "no_recourse": 0, "rejected": 0}
        self._lock = threading.Lock()
        self.started = time.time()
        log.info("serving %s [%s, seed %d] of run %s (world %s, model %s)", self.model_name, rule, seed,
                 self.run_dir, self.world_fingerprint, self.model_fingerprint[:16])

    # ------------------------------------------------------------------ loading
    def _load_run(self, model: str | None) -> None:
        cfg_path, ds_info_path = self.run_dir / "config.yaml", self.run_dir / "dataset.json"
        for p in (cfg_path, ds_info_path):
            if not p.exists():
                raise ServiceError(f"run: {p} is missing ({self.run_dir} is not a trained run directory)")
        self.config = parse_config(yaml.safe_load(cfg_path.read_text()), str(cfg_path))
        self.dataset_info = json.loads(ds_info_path.read_text())
        ds_path = Path(self.dataset_info["path"])
        world_path = ds_path / "world.json"
        if not world_path.exists():
            raise ServiceError(f"dataset: {world_path} is missing (the run's dataset was moved or deleted)")
        manifest_path = ds_path / "manifest.json"
        self.manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        self.world = CapabilityWorld.from_dict(json.loads(world_path.read_text()))
        self.world_fingerprint = self.world.fingerprint()
        recorded = self.dataset_info.get("world_fingerprint")
        if self.world_fingerprint != recorded:
            raise ServiceError(f"world: {world_path} has fingerprint {self.world_fingerprint} but the run was "
                               f"trained on world {recorded}; the world changed since training, so the model's "
                               "answers cannot be trusted (retrain, or restore the original world.json)")
        specs = {spec.name or spec.method: spec for spec in self.config.generators}
        if not specs:
            raise ServiceError(f"model: run {self.run_dir} trained no generators")
        name = model if model is not None else next(iter(specs))
        if name not in specs:
            raise ServiceError(f"model: {name!r} is not a model of this run; known: {sorted(specs)}")
        if self.rule not in self.config.evaluation.filters:
            raise ServiceError(f"filter: {self.rule!r} was not trained; known: {self.config.evaluation.filters}")
        if self.seed not in self.config.seeds:
            raise ServiceError(f"seed: {self.seed} was not trained; known: {self.config.seeds}")
        self.model_name, self.spec = name, specs[name]
        self.model_path = model_dir(self.run_dir, self.spec, self.rule, self.seed)

    def _load_model(self) -> None:
        import learners.registry  # noqa: F401  (fills the generator registry)

        if not (self.model_path / "config.json").exists():
            raise ServiceError(f"model: {self.model_path} has no config.json (not trained; run train.py first)")
        files = [self.model_path / "config.json"] + sorted(
            p for p in self.model_path.iterdir() if p.is_file() and p.suffix in MODEL_SUFFIXES)
        h = hashlib.sha256()
        for p in files:
            h.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
        self.model_fingerprint = h.hexdigest()
        self.model_files = [p.name for p in files]
        try:
            self.generator = Generator.load(self.model_path)
            probe = self.generator.predict(np.zeros((1, self.world.n_features), dtype=np.uint8))
        except Exception as err:  # a model that cannot load or answer here must not be served
            raise ServiceError(f"model: cannot load or run {self.model_path} on this world "
                               f"({type(err).__name__}: {err})") from err
        if np.asarray(probe.sets).ndim != 2 or len(probe.sets) != 1:
            raise ServiceError(f"model: {self.model_path} returned sets of shape {np.shape(probe.sets)} for 1 agent")

    def _allowed_by_group(self) -> np.ndarray:
        w = self.world
        return np.ones((1, w.n_actions), bool) if w.access is None else np.asarray(w.access, bool)

    # ------------------------------------------------------------------ input
    def parse_agents(self, rows: Any, groups: Any = None, field: str = "agents", group_field: str = "groups",
                     single: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """Agents as a (B, n) uint8 array and their groups, or an :class:`InputError` naming the field
        (``single``: one agent, reported as ``field`` rather than ``field[i]``)."""
        n = self.world.n_features
        if not isinstance(rows, np.ndarray):
            rows = list(rows)
            for i, r in enumerate(rows):
                where = field if single else f"{field}[{i}]"
                if not isinstance(r, Sequence | np.ndarray) or isinstance(r, str | bytes):
                    raise InputError(f"{where}: expected a list of {n} values 0/1, got {type(r).__name__}")
                if len(r) != n:
                    raise InputError(f"{where}: expected {n} features, got {len(r)}")
        if len(rows) == 0:
            raise InputError(f"{field}: no agents given")
        if groups is not None and len(groups) != len(rows):
            raise InputError(f"{group_field}: expected {len(rows)} group ids (one per agent), got {len(groups)}")
        try:
            return self.world.validate_agents(rows, groups, name=field)
        except ValueError as err:
            msg = str(err)
            raise InputError(group_field + msg[len("group"):] if msg.startswith("group:") else msg) from None

    # ------------------------------------------------------------------ recommendations
    def recommend(self, X: np.ndarray, groups: np.ndarray | None = None) -> Answers:
        """Verified recommendations for validated agents (see the module docstring)."""
        return self.complete(self.first_pass(X, groups))

    def first_pass(self, X: np.ndarray, groups: np.ndarray | None = None) -> Pending:
        """Steps 1-3 (fast, never waits): world checks and the verified generator answers."""
        w = self.world
        B = len(X)
        ans = Answers(np.full(B, "ok", dtype=object), [()] * B, np.full(B, np.nan), np.full(B, np.nan),
                      np.zeros(B, bool), np.full(B, WORLD_METHOD, dtype=object), [None] * B, np.zeros(B, bool))
        deficits = w.deficits(X, groups)
        accepted = ~deficits.any(1)
        reach = self.reach[0 if groups is None or len(self.reach) == 1 else groups]
        coverable = ~(deficits & ~reach).any(1)
        ans.status[accepted] = "already_positive"
        ans.status[~accepted & ~coverable] = "no_recourse"
        ans.verified[accepted | ~coverable] = True
        ans.cost[accepted] = 0.0
        todo = np.flatnonzero(~accepted & coverable)
        bad = todo
        if len(todo):
            gen_sets, gen_conf = self._generate(X[todo])
            _, priced, valid = w.rollout(X[todo], gen_sets, None if groups is None else groups[todo])
            good = todo[valid]
            for i, row in zip(good, gen_sets[valid], strict=True):
                ans.sets[i] = tuple(int(a) for a in row if a >= 0)
            ans.method[good] = f"generator:{self.generator.method}"
            ans.cost[good], ans.confidence[good], ans.verified[good] = priced[valid], gen_conf[valid], True
            bad = todo[~valid]
        return Pending(ans, X, groups, len(todo), bad)

    def complete(self, p: Pending) -> Answers:
        """Step 4: the exact fallback for the invalid generated answers (waits at most the budget)."""
        ans, bad, w = p.answers, p.bad, self.world
        if len(bad):
            solved = self.fallback.solve(p.X[bad], None if p.groups is None else p.groups[bad], self.fallback_budget_s)
            fb_method = f"fallback:{self.fallback.solver.name}"
            for i, r in zip(bad, solved, strict=True):
                if r is None:
                    ans.status[i], ans.budget_exceeded[i] = "unknown", True
                elif not r[1]:  # cannot happen after the coverage check; kept exact anyway
                    ans.status[i], ans.method[i], ans.verified[i] = "no_recourse", fb_method, True
                else:
                    ans.sets[i], ans.method[i] = r[0], fb_method
                    ans.optimal[i] = not w.order_matters  # priced in the returned order otherwise
            idx = np.array([i for i, r in zip(bad, solved, strict=True) if r is not None and r[1]], np.int64)
            if len(idx):
                width = max(len(ans.sets[i]) for i in idx)
                S = np.array([list(ans.sets[i]) + [-1] * (width - len(ans.sets[i])) for i in idx], dtype=np.int64)
                _, priced, valid = w.rollout(p.X[idx], S, None if p.groups is None else p.groups[idx])
                ans.cost[idx], ans.verified[idx] = priced, valid
        self._count(len(p.X), p.generated, len(bad), ans.verified, ans.status)
        return ans

    def _generate(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The generator's sets (ids checked; an impossible row becomes empty, i.e. invalid) and confidences.

        A generator that fails on a batch is logged and every agent of it goes to the fallback.
        """
        B = len(X)
        try:
            pred = self.generator.predict(X)
            S = np.asarray(pred.sets)
            conf = np.asarray(pred.confidence, dtype=float).reshape(-1)
            if S.ndim != 2 or len(S) != B or len(conf) != B or not np.issubdtype(S.dtype, np.integer):
                raise ValueError(f"predict returned sets {S.shape} {S.dtype} and confidence {conf.shape} for {B} agents")
        except Exception:
            log.exception("generator %s failed on a batch of %d agents; using the fallback", self.model_name, B)
            return np.full((B, 1), -1, np.int64), np.full(B, np.nan)
        S = S.astype(np.int64)
        broken = ((S >= self.world.n_actions) | (S < -1)).any(1)
        S[broken] = -1
        if S.shape[1] == 0:
            S = np.full((B, 1), -1, np.int64)
        return S, conf

    def _count(self, agents: int, generated: int, fallbacks: int, verified: np.ndarray, status: np.ndarray) -> None:
        c = self.counters
        with self._lock:
            c["requests"] += 1
            c["agents"] += agents
            c["generated"] += generated
            c["fallbacks"] += fallbacks
            c["verified"] += int(verified.sum())
            c["budget_exceeded"] += int((status == "unknown").sum())
            c["already_positive"] += int((status == "already_positive").sum())
            c["no_recourse"] += int((status == "no_recourse").sum())
            rate = c["fallbacks"] / max(c["generated"], 1)
        if fallbacks:
            unknown = int((status == "unknown").sum())
            (log.warning if unknown else log.info)(
                "fallback: %d of %d generated answers invalid, %d past the %s budget (fallback rate so far %.2f%%)",
                fallbacks, generated, unknown,
                "unlimited" if self.fallback_budget_s is None else f"{self.fallback_budget_s * 1e3:g} ms", 100 * rate)

    def records(self, ans: Answers) -> list[dict[str, Any]]:
        """JSON-ready answers (the HTTP response rows and the offline file rows)."""
        items = self.action_items
        return [{"status": ans.status[i], "actions": [items[a] for a in ans.sets[i]], "cost": _num(ans.cost[i]),
                 "confidence": _num(ans.confidence[i]), "verified": bool(ans.verified[i]), "method": ans.method[i],
                 "optimal": ans.optimal[i], "budget_exceeded": bool(ans.budget_exceeded[i])}
                for i in range(len(ans.status))]

    def recommend_records(self, rows: Any, groups: Any = None, field: str = "agents", group_field: str = "groups",
                          single: bool = False) -> list[dict[str, Any]]:
        """Parse, recommend in chunks of ``max_batch`` and return JSON-ready rows."""
        X, g = self.parse_agents(rows, groups, field, group_field, single)
        out: list[dict[str, Any]] = []
        for s in range(0, len(X), self.max_batch):
            out += self.records(self.recommend(X[s: s + self.max_batch], None if g is None else g[s: s + self.max_batch]))
        return out

    # ------------------------------------------------------------------ description
    def stats(self) -> dict[str, Any]:
        with self._lock:
            c = dict(self.counters)
        c["fallback_rate"] = c["fallbacks"] / c["generated"] if c["generated"] else 0.0
        return c

    def metrics(self) -> dict[str, Any] | None:
        path = self.run_dir / "metrics.json"
        if not path.exists():
            return None
        entry = json.loads(path.read_text()).get("models", {}).get(f"{self.model_name} [{self.rule}]")
        if entry is None:
            return None
        return next((m for m in entry.get("seeds", []) if m.get("seed") == self.seed), None)

    def describe(self) -> dict[str, Any]:
        w = self.world
        return {
            "run": self.config.name, "run_dir": str(self.run_dir),
            "dataset": {"name": self.manifest.get("name"), "path": self.dataset_info["path"],
                        "content_hash": self.dataset_info.get("content_hash"), "config": self.manifest.get("config")},
            "model": self.model_name, "method": self.generator.method, "filter": self.rule, "seed": self.seed,
            "metrics": self.metrics(),
            "world_fingerprint": self.world_fingerprint, "model_fingerprint": self.model_fingerprint,
            "model_files": self.model_files,
            "world": {"n_features": w.n_features, "n_actions": w.n_actions, "n_groups": w.n_groups,
                      "order_matters": w.order_matters, "feature_names": w.feature_names},
            "fallback": {"solver": f"fallback:{self.fallback.solver.name}",
                         "budget_ms": None if self.fallback_budget_s is None else self.fallback_budget_s * 1e3},
            "max_batch": self.max_batch, "uptime_s": time.time() - self.started,
            "counters": self.stats(),
        }


# ---------------------------------------------------------------------------- HTTP
Bit = Annotated[int, Field(strict=True, ge=0, le=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AgentRequest(_Strict):
    """One agent."""

    x: list[Bit] = Field(description="the agent's capabilities, one 0/1 integer per feature")
    group: StrictInt | None = Field(None, description="the agent's group; required when the world has groups")


class BatchRequest(_Strict):
    """A batch of agents (at most the server's max_batch)."""

    agents: list[list[Bit]] = Field(min_length=1, description="agents, each a list of 0/1 integers per feature")
    groups: list[StrictInt] | None = Field(None, description="one group per agent; required when the world has groups")


class ActionOut(BaseModel):
    id: int = Field(description="action id in the world")
    name: str
    effects: list[str] = Field(description="the capabilities the action adds")


class Recommendation(BaseModel):
    """The answer for one agent."""

    status: Status = Field(description="ok | no_recourse (provably none) | already_positive | unknown (budget)")
    actions: list[ActionOut] = Field(description="recommended actions in the order to take them")
    cost: float | None = Field(description="cost of the actions, priced by the world (null: no recommendation)")
    confidence: float | None = Field(description="the generator's probability of its answer (null: not from the generator)")
    verified: bool = Field(description="checked against the world: accepted at the end, every action allowed")
    method: str = Field(description="generator:<method>, fallback:setcover-bnb or world")
    optimal: bool | None = Field(description="true: certified optimum (exact fallback); null: not certified")
    budget_exceeded: bool = Field(description="the fallback solver did not finish within the budget (status unknown)")


class BatchResponse(BaseModel):
    results: list[Recommendation]
    counts: dict[str, int] = Field(description="agents per status")


class Health(BaseModel):
    status: Literal["ok"]
    model: str
    uptime_s: float


class ModelInfo(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    run: str
    run_dir: str
    dataset: dict[str, Any]
    model: str
    method: str
    filter: str
    seed: int
    metrics: dict[str, Any] | None
    world_fingerprint: str
    model_fingerprint: str = Field(description="sha256 over config.json and the weight files")
    model_files: list[str]
    world: dict[str, Any]
    fallback: dict[str, Any]
    max_batch: int
    uptime_s: float
    counters: dict[str, int | float] = Field(description="requests, agents, generated, verified, fallbacks, "
                                                   "budget_exceeded, already_positive, no_recourse, rejected (4xx responses), "
                                                   "fallback_rate = fallbacks / generated")


def _field(loc: Sequence[Any]) -> str:
    parts = [p for p in loc if p != "body"] if len(loc) > 1 else list(loc)
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


class _Guard:
    """ASGI middleware: 413 with a JSON message for a body over ``limit`` bytes (checked from
    Content-Length before reading, and while reading a body sent without one), and a count of every
    4xx response in the service's ``rejected`` counter."""

    def __init__(self, app: Any, svc: RecommendationService, limit: int):
        self.app, self.svc, self.limit = app, svc, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from fastapi import HTTPException
        from fastapi.responses import JSONResponse

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and 400 <= message["status"] < 500:
                with self.svc._lock:
                    self.svc.counters["rejected"] += 1
            await send(message)

        detail = f"body: larger than the limit of {self.limit} bytes (see max_batch)"
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await JSONResponse({"detail": detail}, status_code=413)(scope, receive, counting_send)
            return
        seen = 0

        async def limited_receive() -> dict[str, Any]:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise HTTPException(413, detail)
            return message

        await self.app(scope, limited_receive, counting_send)


def create_app(run_dir: str | Path, model: str | None = None, rule: str = "all", seed: int = 0,
               fallback_budget_s: float | None = 0.05, max_batch: int = 10_000) -> Any:
    """The FastAPI app serving one model of a run (raises :class:`ServiceError` if it cannot)."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    svc = RecommendationService(run_dir, model, rule, seed, fallback_budget_s, max_batch)
    app = FastAPI(title="recourse-gym recommendations", version="1",
                  description="Verified recommendations from a trained CFE generator with an exact fallback.")
    # Generous for any JSON layout of a full batch; larger bodies get 413 before parsing.
    app.add_middleware(_Guard, svc=svc, limit=1_000_000 + max_batch * (16 * svc.world.n_features + 64))
    app.state.service = svc

    def reject(code: int, detail: str, errors: list[dict[str, str]] | None = None) -> JSONResponse:
        body: dict[str, Any] = {"detail": detail}
        if errors:
            body["errors"] = errors
        return JSONResponse(status_code=code, content=body)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        body = exc.body
        if isinstance(body, dict) and isinstance(body.get("agents"), list) and len(body["agents"]) > max_batch:
            return reject(413, f"agents: batch of {len(body['agents'])} agents exceeds max_batch={max_batch}")
        errs = exc.errors()
        if errs and errs[0]["type"] == "json_invalid":
            e = errs[0]
            return reject(400, f"body: invalid JSON at position {e['loc'][-1]}: {e.get('ctx', {}).get('error', '')}")
        out = []
        for e in errs[:20]:
            msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"]
            got = "" if e["type"] in ("missing", "extra_forbidden") else f", got {_short(e.get('input'))}"
            if isinstance(e.get("input"), bytes | str) and tuple(e["loc"]) == ("body",):
                msg, got = "expected a JSON object (send it with Content-Type: application/json)", ""
            out.append({"field": _field(e["loc"]), "message": f"{msg}{got}"})
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        return reject(422, f"{out[0]['field']}: {out[0]['message']}{more}", out)

    @app.exception_handler(InputError)
    async def _bad_input(request: Request, exc: InputError) -> JSONResponse:
        return reject(422, str(exc))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return JSONResponse(status_code=500, content={"detail": f"internal error ({type(exc).__name__}): {exc}"})

    @app.post("/recommend", response_model=Recommendation, summary="Recommend actions for one agent",
              responses={413: {"description": "request body too large"},
                         422: {"description": "invalid agent (the message names the field)"}})
    async def recommend(req: AgentRequest) -> dict[str, Any]:
        # Sub-millisecond work on the event loop (no thread hand-offs); only a fallback, which may
        # wait up to the budget, moves to a worker thread.
        X, g = svc.parse_agents([req.x], None if req.group is None else [req.group], "x", "group", single=True)
        pending = svc.first_pass(X, g)
        ans = await run_in_threadpool(svc.complete, pending) if len(pending.bad) else svc.complete(pending)
        return svc.records(ans)[0]

    @app.post("/recommend/batch", response_model=BatchResponse, summary="Recommend actions for a batch of agents",
              responses={413: {"description": "more than max_batch agents"},
                         422: {"description": "invalid agents (the message names the field)"}})
    def recommend_batch(req: BatchRequest) -> dict[str, Any]:
        if len(req.agents) > max_batch:
            raise HTTPException(413, f"agents: batch of {len(req.agents)} agents exceeds max_batch={max_batch}")
        results = svc.recommend_records(req.agents, req.groups)
        counts: dict[str, int] = {}
        for r in results:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        return {"results": results, "counts": counts}

    @app.get("/health", response_model=Health, summary="Liveness")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": svc.model_name, "uptime_s": time.time() - svc.started}

    @app.get("/model", response_model=ModelInfo, summary="The served model, its provenance and counters")
    def model_info() -> dict[str, Any]:
        return svc.describe()

    return app


# ---------------------------------------------------------------------------- offline batch
def _read_agents(path: Path, n_features: int, feature_names: list[str]) -> tuple[Any, Any]:
    import pandas as pd

    if not path.exists():
        raise InputError(f"batch-in: {path} does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            df = pd.read_csv(path)
        elif suffix in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        else:
            raise InputError(f"batch-in: {path} must be .csv or .parquet")
    except (OSError, ValueError) as err:
        if isinstance(err, InputError):
            raise
        raise InputError(f"batch-in: cannot read {path} ({err})") from None
    if "x" in df.columns:
        try:
            rows = [json.loads(v) if isinstance(v, str) else list(v) for v in df["x"]]
        except (TypeError, ValueError) as err:
            raise InputError(f"x: expected a list of 0/1 per row ({err})") from None
    else:
        for cols in ([f"f{j}" for j in range(n_features)], feature_names):
            if all(c in df.columns for c in cols):
                break
        else:
            missing = [c for c in (f"f{j}" for j in range(n_features)) if c not in df.columns]
            raise InputError(f"columns: expected f0..f{n_features - 1} (or the world's feature names) or a list "
                             f"column 'x'; missing {missing[:5]}{'...' if len(missing) > 5 else ''}")
        rows = df[cols].to_numpy(dtype=float, na_value=np.nan)
    groups = None
    if "group" in df.columns:
        g = df["group"]
        if g.isna().any() or not pd.api.types.is_integer_dtype(g.dtype):
            raise InputError("group: expected an integer group id in every row")
        groups = g.to_numpy(dtype=np.int64)
    return rows, groups


def recommend_file(svc: RecommendationService, in_path: str | Path, out_path: str | Path) -> dict[str, int]:
    """Recommend for every agent of a CSV/Parquet file and write one row per agent (same path as HTTP)."""
    import pandas as pd

    in_path, out_path = Path(in_path), Path(out_path)
    if out_path.suffix.lower() not in (".csv", ".parquet", ".pq"):
        raise InputError(f"batch-out: {out_path} must be .csv or .parquet")
    rows, groups = _read_agents(in_path, svc.world.n_features, svc.world.feature_names)
    records = svc.recommend_records(rows, groups, "x", "group")
    table = pd.DataFrame({
        "agent": np.arange(len(records)),
        "status": [r["status"] for r in records],
        "action_ids": [[a["id"] for a in r["actions"]] for r in records],
        "actions": [[a["name"] for a in r["actions"]] for r in records],
        "cost": [r["cost"] for r in records],
        "confidence": [r["confidence"] for r in records],
        "verified": [r["verified"] for r in records],
        "method": [r["method"] for r in records],
        "optimal": pd.array([r["optimal"] for r in records], dtype="boolean"),
        "budget_exceeded": [r["budget_exceeded"] for r in records],
    })
    if groups is not None:
        table.insert(1, "group", groups)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if out_path.suffix.lower() == ".csv":
        for col in ("action_ids", "actions"):
            table[col] = [json.dumps(v) for v in table[col]]
        table.to_csv(out_path, index=False)
    else:
        table.to_parquet(out_path, index=False)
    return table["status"].value_counts().to_dict()
