"""Serve a tabular run (``runs/<dataset>_<model>``): raw records in, verified counterfactuals out.

:class:`TabularService` loads a run with ``evaluation.tabular_experiment.load_tabular_run`` (the
world's model and encoder are checked against ``world/fingerprint.json`` there; a mismatch is
refused at start) and answers raw records in three steps:

1. the run's generator proposes a counterfactual for the whole batch at once
   (``TabularGenerator.recommend``); every proposal is *verified* here, whatever the generator
   promises: the served model (the run's white box, equal to the sklearn model) must accept it and
   :meth:`RecordCodec.violations` must find nothing (bounds, integer codes, one-hot groups,
   immutable and increase/decrease-only features, all re-checked against the request's record),
   nor the world's rules (``world.compiled_rules().violations``; :mod:`serving.tabular_rules`: a
   refusal is counted per rule name, and a ``no_recourse`` or ``unknown`` answer the rules caused
   names them in ``refused_by``);
2. a record the generator cannot answer goes to GeCo (black box, tenths of a second), and where
   GeCo finds nothing verified, to MACE (certified: ``optimal`` is MACE's certificate, and
   ``no_recourse`` is said only on MACE's proof that no plausible counterfactual exists);
3. the fallbacks run on one worker thread within the request's budget; past it the answer is
   ``status: unknown`` and the job finishes in the background into a cache keyed by the encoded
   record (:class:`serving.fallback.BackgroundCache`), so the same request later gets the answer.

Diverse alternatives (``n_diverse``) come from GeCo's diverse set (distinct sets of changed
features, nearest first), or from MACE's successive runs when MACE answers.

A run on the black-box route (the user's model has no white box; ``evaluation.blackbox_runs``): the
chain is GeCo only (MACE cannot read the model and is never called), no answer is ``optimal`` and
nothing is ``no_recourse``; verification is unchanged (the world's model is the user's, and its oracle).
The JSON rows and ``/model`` are formatted in :mod:`serving.tabular_answers`.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from serving.alternatives import diverse, nearest_first
from serving.fallback import BackgroundCache
from serving.processes import FALLBACK_NICE, lower_priority, stop_pool, stop_resource_tracker, track_pool
from serving.records import RecordCodec, RecordError
from serving.remote_model import RemoteModel
from serving.service import InputError, ServiceError
from serving.tabular_answers import (
    METHODS,
    OUTCOMES,
    answer_records,
    describe_service,
    fallback_chain,
    service_stats,
)
from serving.tabular_chain import Answer, FallbackChain
from serving.tabular_rules import broken_rule, count_refusals, merge
from serving.tabular_runs import is_tabular_run, load_run, run_fingerprint  # noqa: F401  (is_tabular_run: re-exported)

log = logging.getLogger("recourse_gym.serve")

# GeCo and MACE run here, one job at a time (HiGHS and numpy release the GIL; the event loop stays free).
_SOLVER_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tabular-fallback", initializer=lower_priority)
SWITCH_INTERVAL_S = 0.0001  # GIL hand-over interval while a fallback runs beside requests (Python's default: 5 ms)
MAX_RESTARTS = 5  # fallback processes started again after one died; beyond, the fallback runs in the server
MAX_QUEUED = 512  # fallback jobs waiting at most; beyond, a record is answered "unknown" without queueing
CACHE_SIZE = 50_000


_PROCESS_STATE: dict[str, Any] = {}  # in a fallback process: the service's solver half


def _process_init(state_file: str) -> None:
    """Fallback process start: lower priority, then the pickled service state (world, GeCo, codec...) from
    ``state_file`` (a file, not the spawn pipe: the parent writes the pipe while it holds its read end, so
    a child that died while reading a large state would block the parent for good)."""
    import pickle

    try:  # absolute: the pool is started from the fallback thread, already at FALLBACK_NICE (os.nice adds)
        os.setpriority(os.PRIO_PROCESS, 0, max(FALLBACK_NICE, os.getpriority(os.PRIO_PROCESS, 0)))
    except (AttributeError, OSError):
        pass
    from serving.processes import exit_with_parent

    exit_with_parent()  # a server killed with SIGKILL leaves no fallback process behind
    _PROCESS_STATE.update(pickle.loads(Path(state_file).read_bytes()))
    _PROCESS_STATE["jobs"] = BackgroundCache(_SOLVER_THREAD, 1_000)  # the process's own GeCo cache


def _process_call(name: str, *args: Any) -> Any:
    """Run ``TabularService.<name>`` on the process's copy of the solver state."""
    solver = TabularService.__new__(TabularService)
    solver.__dict__.update(_PROCESS_STATE)
    solver.fallback_process = False  # in here, solve in place
    return getattr(solver, name)(*args)


NO_GENERATOR = "none"  # ``model="none"``: no generator; every record goes to the fallback chain


class NoGenerator:
    """The generator of ``model="none"``: answers nothing, so the fallback chain answers every record."""

    method = NO_GENERATOR

    def recommend(self, world: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(NaN rows, inf distances): no proposal for any record."""
        X = np.atleast_2d(X)
        return np.full(X.shape, np.nan), np.full(len(X), np.inf)


class TabularService(FallbackChain):
    """One tabular run: its world, generator, the GeCo -> MACE fallback chain, counters, provenance."""

    kind = "tabular"

    def __init__(self, run_dir: str | Path, model: str | None = None, fallback_budget_s: float | None = 0.05,
                 max_batch: int = 10_000, max_diverse: int = 5, *, run: Any = None,
                 geco_data: np.ndarray | None = None, fallback_process: bool = False, model_latency_s: float = 0.0):
        if max_batch < 1:
            raise ServiceError(f"max_batch: must be >= 1, got {max_batch}")
        if fallback_budget_s is not None and not fallback_budget_s >= 0:
            raise ServiceError(f"fallback_budget_s: must be >= 0 or None (no limit), got {fallback_budget_s}")
        self.run_dir = Path(run_dir)
        self.fallback_budget_s = None if fallback_budget_s is None or math.isinf(fallback_budget_s) else fallback_budget_s
        self.max_batch, self.max_diverse = max_batch, max_diverse
        if not model_latency_s >= 0:
            raise ServiceError(f"model_latency_s: must be >= 0, got {model_latency_s}")
        self.run = run if run is not None else self._load_run()
        self.world = self.run.world
        self.remote: RemoteModel | None = None  # the model behind a round trip: predict_proba only, GeCo only
        if model_latency_s > 0:
            self.remote = RemoteModel(self.world.model, latency_s=model_latency_s)
            self.world = replace(self.world, model=self.remote)
        cfg = self.run.config
        self.config = cfg.model_dump(mode="json") if hasattr(cfg, "model_dump") else dict(cfg or {})
        self.tab = dict(self.config.get("tabular") or {})
        gens = dict(self.run.generators)
        if not gens:
            raise ServiceError(f"model: run {self.run_dir.name} has no trained generator")
        name = model if model is not None else next(iter(gens))
        if name == NO_GENERATOR:  # the fallback chain alone: the solvers' own latency, a baseline
            gens[name] = NoGenerator()
        if name not in gens:
            raise ServiceError(f"model: {name!r} is not a generator of this run; known: {sorted(gens)} "
                               f"(or {NO_GENERATOR!r}: the fallback chain alone)")
        self.model_name, self.generator = name, gens[name]
        self._gen_params = set(inspect.signature(self.generator.recommend).parameters)
        self.mace_params = dict(self.run.mace_params or {})
        rules = self.rules
        self.codec = RecordCodec(self.world.encoder, self.mace_params.get("norm", "one"),
                                 None if rules is None else rules.cost)  # the distance MACE certifies
        self.oracle = self.run.user_oracle() if hasattr(self.run, "user_oracle") else None  # issue 54 item 4
        self.batch_worker: Any = None  # serving.batch_worker.BatchWorker: batch chunks in a process of their own
        # GeCo only, nothing certified: the user's model without a white box, or a model behind a round trip
        self.black_box = bool(getattr(self.run, "black_box", False)) or self.remote is not None
        self.fingerprint = self._fingerprint()
        self._probe()
        self.geco = self._fit_geco(geco_data)
        self.jobs = BackgroundCache(_SOLVER_THREAD, CACHE_SIZE)
        # True (the HTTP server): GeCo and MACE run in a child process at lower priority, so they
        # share neither the GIL nor, at nice 10, a busy core with the generator's requests.
        self.fallback_process = bool(fallback_process)
        self._pool: Any = None
        self._pool_lock = threading.Lock()
        self.restarts = 0  # fallback processes started again after one died
        self._closed = False
        self._state_file: str | None = None  # the pickled solver state a fallback process starts from
        # The fallback thread shares the GIL with the request threads: by default a waiting thread
        # gets it back only every 5 ms, which a generator answer (~10 GIL hand-overs) pays each time.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        self._queued = 0
        self._futures: set[Any] = set()
        self.counters: dict[str, int] = {"requests": 0, "records": 0, "generator": 0, "geco": 0, "mace": 0,
                                         "unknown": 0, "no_recourse": 0, "already_positive": 0, "verified": 0,
                                         "generator_invalid": 0, "generator_none": 0, "rejected": 0,
                                         "rule_refusals": 0}
        self.rule_refusals: dict[str, int] = {}  # generator answers refused, per rule name (tabular_rules)
        self._lock = threading.Lock()
        self.started = time.time()
        log.info("serving tabular run %s: %s %s, generator %s, fallback %s (model %s)", self.run_dir.name,
                 self.tab.get("dataset") or self.tab.get("table"), self.tab.get("model_file") or self.tab.get("model"),
                 self.model_name,
                 " -> ".join(fallback_chain(self)) or "none", self.fingerprint.get("model_sha256", "")[:16])

    # ------------------------------------------------------------------ loading
    def _load_run(self) -> Any:
        return load_run(self.run_dir)

    def _fingerprint(self) -> dict[str, str]:
        return run_fingerprint(self.run_dir, self.run.world)  # the run's model, also when served remote

    def example_row(self) -> np.ndarray:
        """An encoded record of each feature's first value (lowest number, first level)."""
        row = np.zeros(self.codec.n_columns)
        for d in self.codec.domains:
            row[d.columns[0]] = 1.0 if d.one_hot else (d.first_code if d.levels else d.lower)
        return row

    def _probe(self) -> None:
        """The generator must answer one record with the right shapes, or the run is not served."""
        row = self.example_row()[None]
        try:
            cf, dist = self.generator.recommend(self.world, row)
            cf, dist = np.asarray(cf, float), np.asarray(dist, float)
        except Exception as err:
            hint = ("; a remote model is seen through predict_proba only: serve a proposer generator, which "
                    "only calls it") if self.remote is not None else ""
            raise ServiceError(f"model: generator {self.model_name!r} cannot answer on this world "
                               f"({type(err).__name__}: {err}){hint}") from err
        if cf.shape != row.shape or dist.shape != (1,):
            raise ServiceError(f"model: generator {self.model_name!r} returned shapes {cf.shape}, {dist.shape} "
                               f"for 1 record of {row.shape[1]} columns")

    def _fit_geco(self, data: np.ndarray | None) -> Any:
        """GeCo on the run's training data (its feasible space); None (MACE only) if the data is unavailable."""
        from solvers.geco import GeCo, Plaf

        if data is None:
            try:
                if hasattr(self.run, "domain_rows"):
                    data = self.run.domain_rows()
                else:
                    from data_gen.loaders import load_data

                    loaded = load_data(self.tab["dataset"], seed=int(self.tab.get("seed", 0)))
                    if loaded.encoder != self.world.encoder:
                        raise ValueError("the data's encoder differs from the run's")
                    data = loaded.X_train
            except Exception as err:
                log.warning("GeCo fallback disabled: cannot load the run's training data (%s)", err)
                return None
        # The schema's mutability only (MACE's plausibility), so both fallbacks answer the same question.
        return GeCo(plaf=Plaf(), n_diverse=self.max_diverse + 1, seed=0).fit(self.world, np.asarray(data, float))

    # ------------------------------------------------------------------ input
    def parse(self, records: Any, field: str = "records", single: bool = False) -> np.ndarray:
        """Encoded rows of raw records, or an :class:`InputError` naming the field."""
        if not isinstance(records, list | tuple):
            raise InputError(f"{field}: expected a list of records")
        if not records:
            raise InputError(f"{field}: no records given")
        try:
            return self.codec.encode(records, field, single)
        except RecordError as err:
            raise InputError(str(err)) from None

    # ------------------------------------------------------------------ verification
    @property
    def rules(self) -> Any:
        """The world's rules compiled (``envs.rules.CompiledRules``, cached); None: the schema's mutability only."""
        return self.world.compiled_rules()

    def verify(self, X: np.ndarray, CF: np.ndarray) -> np.ndarray:
        """Per row: ``CF`` is a plausible change of ``X`` that keeps the world's rules and that the served model accepts."""
        return self.check(X, CF)[0]

    def check(self, X: np.ndarray, CF: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(ok, rule)`` per row: :meth:`verify`'s verdict, and the name of the first world rule the row
        breaks (None where it keeps them, or the world has no rules)."""
        rule = broken_rule(self.rules, X, CF)
        bad = self.codec.violations(X, CF)
        ok = np.array([b is None for b in bad]) & np.equal(rule, None)
        if ok.any():
            ok[ok] = self.world.accepts(CF[ok])
        if self.oracle is not None and ok.any():  # a run on the user's model: its own verdict on the raw record
            ok[ok] = self.oracle(CF[ok])
        return ok, rule

    # ------------------------------------------------------------------ recommendations
    def recommend(self, X: np.ndarray, n_diverse: int = 0, budget_s: float | None = -1.0) -> list[Answer]:
        """Verified answers for encoded records (``budget_s``: -1 = the service's budget, None = no limit)."""
        budget = self.fallback_budget_s if budget_s == -1.0 else budget_s
        t_end = math.inf if budget is None else time.perf_counter() + budget
        answers, bad = self.first_pass(X, n_diverse)
        self.complete(X, answers, bad, n_diverse, t_end)
        return answers

    def _generate(self, X: np.ndarray, n_alt: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The generator's counterfactuals (NaN rows: none) and, where it offers them, alternatives."""
        kw: dict[str, Any] = {}
        if "norm" in self._gen_params:
            kw["norm"] = self.codec.norm
        if n_alt and "n_alternatives" in self._gen_params:
            kw["n_alternatives"] = n_alt * 3  # more than asked: the diversity filter drops near-copies
        out = self.generator.recommend(self.world, X, **kw)
        CF, _ = out
        CF = np.asarray(CF, float)
        if CF.shape != X.shape:
            raise ValueError(f"recommend returned shape {CF.shape} for {len(X)} records")
        alts = getattr(out, "alternatives", None) if n_alt else None
        return CF, None if alts is None else np.asarray(alts, float)

    def first_pass(self, X: np.ndarray, n_diverse: int = 0) -> tuple[list[Answer], np.ndarray]:
        """The model's own acceptance and the generator's verified answers (and its verified
        alternatives), batched, never waiting; returns the answers so far and the indices that
        need the fallback chain. Against a remote model, the generator answers every record first and the
        records ride along its first call, and the checks reuse the model's answers (2 round trips, not 4)."""
        n_diverse = max(0, min(int(n_diverse), self.max_diverse))
        if self.remote is None:
            return self._first_pass(X, n_diverse, None)
        with self.remote.request(X):
            return self._first_pass(X, n_diverse, self._try_generate(X, n_diverse))

    def _try_generate(self, X: np.ndarray, n_diverse: int) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`_generate`, or NaN rows (the fallback answers) where the generator fails."""
        try:
            return self._generate(X, n_diverse)
        except Exception:
            log.exception("generator %s failed on %d records; using the fallback", self.model_name, len(X))
            return np.full(X.shape, np.nan), None

    def _first_pass(self, X: np.ndarray, n_diverse: int, early: tuple[np.ndarray, np.ndarray | None] | None
                    ) -> tuple[list[Answer], np.ndarray]:
        """:meth:`first_pass`; ``early``: the generator's answers for every record, asked before the model's
        own acceptance (None: ask it for the rejected records only)."""
        B = len(X)
        answers: list[Answer] = [Answer("unknown") for _ in range(B)]
        accepted = self.world.accepts(X)
        for i in np.flatnonzero(accepted):
            answers[i] = Answer("already_positive", X[i].copy(), 0.0, "model", "model", None, True)
        todo = np.flatnonzero(~accepted)
        if not len(todo):
            return answers, todo
        if early is None:
            CF, alts = self._try_generate(X[todo], n_diverse)
        else:
            CF, alts = early[0][todo], None if early[1] is None else early[1][todo]
        none = np.isnan(CF).all(1)
        ok, rule, live = ~none, np.full(len(todo), None, object), ~none
        if live.any():
            ok[live], rule[live] = self.check(X[todo[live]], CF[live])
        count_refusals(self, rule)
        dist = self.codec.distance(X[todo], np.where(np.isfinite(CF), CF, 0.0))
        for r in np.flatnonzero(ok):
            answers[todo[r]] = Answer("ok", CF[r], float(dist[r]), self.model_name, "generator", None, True)
        for r in np.flatnonzero(np.not_equal(rule, None)):  # said if no other answer is found
            answers[todo[r]] = Answer("unknown", refused_by=(rule[r],))
        if alts is not None and alts.ndim == 3 and alts.shape[0] == len(todo) and alts.shape[2] == X.shape[1]:
            rows, m = np.flatnonzero(ok), alts.shape[1]
            A = alts[rows].reshape(-1, X.shape[1])
            Xr = np.repeat(X[todo[rows]], m, 0)
            live = ~np.isnan(A).any(1)
            good = live.copy()
            if live.any():
                good[live] = self.verify(Xr[live], A[live])
            dA = self.codec.distance(Xr, np.nan_to_num(A))
            for k, r in enumerate(rows):
                i = todo[r]
                cand = [(A[j], float(dA[j]), self.model_name) for j in range(k * m, (k + 1) * m) if good[j]]
                answers[i].alternatives = self.diverse(X[i], answers[i].cf, cand, n_diverse)
        with self._lock:
            self.counters["generator_none"] += int(none.sum())
            self.counters["generator_invalid"] += int((~none & ~ok).sum())
        return answers, todo[~ok]

    def complete(self, X: np.ndarray, answers: list[Answer], bad: np.ndarray, n_diverse: int, t_end: float) -> None:
        """The fallback chain for ``bad`` records, and alternatives where asked, until ``t_end``."""
        n_diverse = max(0, min(int(n_diverse), self.max_diverse))
        jobs = []
        for i in bad:  # submit them all first: the worker thread gets going while we wait
            key = (X[i].tobytes(), n_diverse)
            hit = self.jobs.get([key])[0]
            jobs.append((i, hit if hit is not None else self._submit(key, self._chain, X[i], n_diverse)))
        alt_jobs = []
        if n_diverse and self.geco is not None:
            for i, a in enumerate(answers):
                if a.kind == "generator" and len(a.alternatives) < n_diverse:  # GeCo tops them up
                    key = ("geco", X[i].tobytes())
                    hit = self.jobs.get([key])[0]
                    alt_jobs.append((i, hit if hit is not None else self._submit(key, self._geco_answers, X[i])))
        for i, job in jobs:
            ans = job if isinstance(job, Answer) else self._wait(job, t_end)
            ans = None if ans is None else replace(ans, alternatives=list(ans.alternatives))  # the cache's stays
            ans = ans if ans is not None else Answer("unknown", budget_exceeded=True)
            answers[i] = replace(ans, refused_by=merge(answers[i].refused_by, ans.refused_by))
        for i, job in alt_jobs:
            found = job if isinstance(job, list) else self._wait(job, t_end)
            if found is not None:
                answers[i].alternatives = self.diverse(X[i], answers[i].cf, answers[i].alternatives + found, n_diverse)
        for i, a in enumerate(answers):
            if a.kind == "mace" or a.kind == "geco":
                a.alternatives = self.diverse(X[i], a.cf, a.alternatives, n_diverse)
            answers[i] = nearest_first(self.codec, X[i], answers[i], n_diverse)

    def diverse(self, x: np.ndarray, primary: np.ndarray | None, cands: list[tuple[np.ndarray, float, str]],
                n: int) -> list[tuple[np.ndarray, float, str]]:
        return diverse(self.codec, x, primary, cands, n)

    def _submit(self, key: Any, fn: Any, *args: Any) -> Any:
        with self._lock:
            if self._queued >= MAX_QUEUED:
                return None
            self._queued += 1
        fut = self.jobs.submit([key], fn, *args)
        with self._lock:
            self._futures.add(fut)

        def done(f: Any) -> None:
            with self._lock:
                self._queued -= 1
                self._futures.discard(f)
        fut.add_done_callback(done)
        return fut

    def close(self) -> None:
        """Drop the fallback jobs still queued and stop the fallback process (SIGTERM, then SIGKILL after
        :data:`serving.processes.PROCESS_STOP_S`): for a shutdown or a test's end. A job running in the server process finishes."""
        with self._lock:
            futures = list(self._futures)
        for f in futures:
            f.cancel()
        with self._pool_lock:
            pool, self._pool, self._closed = self._pool, None, True
        stop_pool(pool)
        if pool is not None:
            pool = None  # freed by the tracker's stop (its semaphores unlinked while the tracker runs)
            stop_resource_tracker()
        if self._state_file is not None:
            Path(self._state_file).unlink(missing_ok=True)
            self._state_file = None

    def fallback_pids(self) -> list[int]:
        """The process ids of the fallback process (empty before its first use, or without one)."""
        with self._pool_lock:
            procs = getattr(self._pool, "_processes", None) or {}
            return [p.pid for p in list(procs.values()) if p.pid is not None]

    def _wait(self, fut: Any, t_end: float) -> Any:
        if fut is None:
            return None
        finished, result = self.jobs.wait(fut, t_end, drop_queued=False)
        return result if finished else None

    # ------------------------------------------------------------------ the fallback chain (worker thread)
    def _in_process(self, name: str, *args: Any) -> Any:
        """``self.<name>(*args)`` in the fallback process (started on first use), or here."""
        if not self.fallback_process:
            return getattr(self, name)(*args)
        from concurrent.futures.process import BrokenProcessPool

        for _ in range(MAX_RESTARTS + 2):
            with self._pool_lock:  # submit under the lock: close() then sees a process being started
                pool = self._fallback_pool()
                if pool is None:  # closed (shutting down), or past the restart limit
                    break
                try:
                    fut = pool.submit(_process_call, name, *args)
                except BrokenProcessPool as err:  # died while idle
                    fut = err
                except RuntimeError:  # shut down by a close() in between: answered below
                    break
            try:
                if isinstance(fut, BrokenProcessPool):
                    raise fut
                return fut.result()  # blocks this worker thread only
            except BrokenProcessPool as err:
                self._replace_pool(pool, err)
        if self._closed:
            raise RuntimeError("the service is shut down")
        return getattr(self, name)(*args)

    def _fallback_pool(self) -> Any:
        """The fallback process pool, started on first use; None once closed or past :data:`MAX_RESTARTS`
        (call with ``_pool_lock`` held)."""
        if self._closed or not self.fallback_process:
            return None
        if self._pool is None:
            import multiprocessing
            import pickle
            from concurrent.futures import ProcessPoolExecutor

            if self._state_file is None:
                import tempfile

                state = {k: getattr(self, k) for k in ("world", "geco", "codec", "mace_params", "max_diverse", "oracle",
                                                       "black_box")}
                with tempfile.NamedTemporaryFile(prefix="recourse-fallback-", suffix=".pkl", delete=False) as f:
                    f.write(pickle.dumps(state))
                self._state_file = f.name
            self._pool = track_pool(ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                        initializer=_process_init, initargs=(self._state_file,)))
        return self._pool

    def _replace_pool(self, pool: Any, err: Exception) -> None:
        """A fallback process died: start another (at most :data:`MAX_RESTARTS` times), or solve here."""
        with self._pool_lock:
            if self._pool is not pool:  # another thread replaced it already
                return
            self._pool = None
            if self._closed:
                return
            if self.restarts < MAX_RESTARTS:
                self.restarts += 1
                log.error("fallback process died (%s); starting a new one (restart %d of %d)", err or "killed",
                          self.restarts, MAX_RESTARTS)
            else:
                self.fallback_process = False
                log.error("fallback process died (%s) after %d restarts; solving in the server process from now on",
                          err or "killed", MAX_RESTARTS)
        stop_pool(pool)

    # ------------------------------------------------------------------ answers
    def count(self, answers: list[Answer]) -> None:
        with self._lock:
            c = self.counters
            c["requests"] += 1
            c["records"] += len(answers)
            for a in answers:
                if a.status in OUTCOMES:
                    c[a.status] += 1
                elif a.kind in METHODS:
                    c[a.kind] += 1
                c["verified"] += int(a.verified)

    def records(self, X: np.ndarray, answers: list[Answer], t0: float | None = None) -> list[dict[str, Any]]:
        """JSON-ready answers (the HTTP rows and the offline file rows); ``latency_ms`` from ``t0``."""
        return answer_records(self, X, answers, t0)

    def recommend_records(self, records: Any, n_diverse: int = 0, field: str = "records",
                          single: bool = False) -> list[dict[str, Any]]:
        """Parse raw records, answer them in chunks of ``max_batch`` and return JSON-ready rows."""
        t0 = time.perf_counter()
        X = self.parse(records, field, single)
        out: list[dict[str, Any]] = []
        for s in range(0, len(X), self.max_batch):
            ans = self.recommend(X[s: s + self.max_batch], n_diverse)
            self.count(ans)
            out += self.records(X[s: s + self.max_batch], ans, t0)
        return out

    # ------------------------------------------------------------------ description
    def stats(self) -> dict[str, Any]:
        """The counters, and per method and outcome its share of the records that needed recourse."""
        return service_stats(self)

    def describe(self) -> dict[str, Any]:
        """Provenance and counters (``/model``): names and hashes, never filesystem paths."""
        return describe_service(self)
