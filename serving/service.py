"""Serve a trained generator: one model of a run directory, its world and the exact fallback
(the library behind ``serve.py``; the HTTP layer is :mod:`serving.app`, files :mod:`serving.batch`).

:class:`RecommendationService` loads a run directory -- the world from the dataset's
``world.json`` (refused when its fingerprint differs from the one recorded at training) and one
generator with :meth:`Generator.load` (``weights_only`` state dicts / ``allow_pickle=False``
arrays, never a pickle) -- and answers batches of agents with
:class:`~serving.fallback.VerifiedRecommender`: the generator's answer where the world verifies
it, the exact set cover where it does not, within the fallback budget. It keeps the counters
and the provenance that ``/model`` reports.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from envs.capability import CapabilityWorld
from evaluation.config import parse_config
from evaluation.experiment import model_dir
from learners.base import Generator
from serving.fallback import Answers, Pending, VerifiedRecommender

log = logging.getLogger("recourse_gym.serve")

MODEL_SUFFIXES = (".pt", ".npz")  # weight files hashed into the model fingerprint (besides config.json)


class ServiceError(ValueError):
    """The run directory cannot be served (missing files, changed world, unusable model)."""


class InputError(ValueError):
    """A request or input file is invalid; the message starts with the offending field."""


def _num(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


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
        self.recommender = VerifiedRecommender(w, self.generator, self.fallback_budget_s, self.model_name)
        self.action_items = [{"id": a, "name": w.action_names[a],
                              "effects": [w.feature_names[j] for j in np.flatnonzero(w.actions[a])]}
                             for a in range(w.n_actions)]
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
        """Verified recommendations for validated agents (see :mod:`serving.fallback`)."""
        return self.complete(self.first_pass(X, groups))

    def first_pass(self, X: np.ndarray, groups: np.ndarray | None = None) -> Pending:
        """World checks and verified generator answers (fast, never waits)."""
        return self.recommender.first_pass(X, groups)

    def complete(self, p: Pending) -> Answers:
        """The exact fallback for the invalid generated answers (waits at most the budget), counted."""
        ans = self.recommender.complete(p)
        self._count(len(p.X), p.generated, len(p.bad), ans.verified, ans.status)
        return ans

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
        """The counters and the fallback rate (fallbacks / generated)."""
        with self._lock:
            c = dict(self.counters)
        c["fallback_rate"] = c["fallbacks"] / c["generated"] if c["generated"] else 0.0
        return c

    def metrics(self) -> dict[str, Any] | None:
        """This model's held-out metrics from the run's metrics.json (None until evaluate.py ran)."""
        path = self.run_dir / "metrics.json"
        if not path.exists():
            return None
        entry = json.loads(path.read_text()).get("models", {}).get(f"{self.model_name} [{self.rule}]")
        if entry is None:
            return None
        return next((m for m in entry.get("seeds", []) if m.get("seed") == self.seed), None)

    def describe(self) -> dict[str, Any]:
        """Provenance and counters (``/model``). Names, never filesystem paths: the answer may
        leave the machine, and where the server keeps its files is nobody else's business."""
        w = self.world
        return {
            "run": self.config.name, "run_dir": self.run_dir.resolve().name,
            "dataset": {"name": self.manifest.get("name"), "dir": Path(self.dataset_info["path"]).name,
                        "content_hash": self.dataset_info.get("content_hash"), "config": self.manifest.get("config")},
            "model": self.model_name, "method": self.generator.method, "filter": self.rule, "seed": self.seed,
            "metrics": self.metrics(),
            "world_fingerprint": self.world_fingerprint, "model_fingerprint": self.model_fingerprint,
            "model_files": self.model_files,
            "world": {"n_features": w.n_features, "n_actions": w.n_actions, "n_groups": w.n_groups,
                      "order_matters": w.order_matters, "feature_names": w.feature_names},
            "fallback": {"solver": self.recommender.fallback.method,
                         "budget_ms": None if self.fallback_budget_s is None else self.fallback_budget_s * 1e3},
            "max_batch": self.max_batch, "uptime_s": time.time() - self.started,
            "counters": self.stats(),
        }
