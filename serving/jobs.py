"""Batches that do not starve single requests: bounded chunks off the event loop, and batch jobs.

A 10,000-record batch answered in one piece blocks the server: FastAPI parses and validates its
body, and serializes its answer, on the event loop, and the generator holds the GIL for long
stretches on 10,000 rows. :func:`install_batch_routes` serves the batch endpoints of the
raw-record apps (tabular and sequential runs) so that every piece of work is bounded:

- ``POST /recommend/batch`` (synchronous, the whole answer at the end): the body is read as bytes;
  JSON decoding, validation (:data:`CHUNK` records at a time), answering and serializing run on a
  worker thread, :data:`CHUNK` records at a time, so ``/health`` and single requests get the GIL
  between chunks. The per-request fallback budget applies to each chunk.
- ``POST /jobs`` (asynchronous: the pattern of long-running operations, 202 Accepted with a
  ``Location``): the same body, validated the same way, answered in the background one job at a
  time (:data:`MAX_JOBS` waiting at most, 429 beyond); ``GET /jobs/{id}?offset=&limit=`` gives
  its status, progress and a page of the answers finished so far (in record order);
  ``DELETE /jobs/{id}`` cancels it and deletes it with its answers (a later ``GET`` is 404). A finished
  job's answers are kept for :data:`JOB_TTL_S` seconds (at most :data:`KEEP_JOBS` jobs), then it is
  gone (404). With a jobs directory (``serve.py``: ``<run>/jobs`` unless ``--jobs-dir``), every accepted
  job and each finished chunk are on disk (``serving/job_files.py``): a restarted server finishes the
  jobs a stop or a SIGKILL interrupted, from their first missing chunk.

Both run the same code as the synchronous endpoint before them (``svc.recommend``, ``svc.count``,
``svc.records``), so a record gets the same answer whichever way it is sent.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from serving.job_files import JobFiles

log = logging.getLogger("recourse_gym.serve")

CHUNK = 250  # records per unit of batch work: ~0.1-0.4 s of generator time, then the event loop's turn
MAX_JOBS = 8  # jobs queued or running at most (429 beyond)
KEEP_JOBS = 32  # finished jobs kept at most (the oldest go first)
JOB_TTL_S = 3600.0  # a finished job's answers are kept this long
PAGE = 1000  # answers per GET /jobs/{id} at most

JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]


class Job(BaseModel):
    """A batch job: its progress and one page of its answers."""

    id: str
    status: JobStatus = Field(description="queued | running | done | failed | cancelled")
    total: int = Field(description="records in the job")
    done: int = Field(description="records answered so far (the answers are in record order)")
    counts: dict[str, int] = Field(description="answers so far per status")
    error: str | None = Field(None, description="why a failed job failed")
    offset: int = Field(0, description="index of the first answer in results")
    results: list[Any] = Field(default_factory=list, description="answers offset .. offset+limit-1 (finished ones)")


class _Reader:
    """Decodes and validates a batch body off the event loop, ``CHUNK`` records at a time, with the
    errors FastAPI would give (locations ``body.records[i].feature``)."""

    def __init__(self, Batch: type[BaseModel], items: str):
        self.Batch, self.items = Batch, items
        self.records = TypeAdapter(Batch.model_fields[items].annotation)  # list[Record]
        self.max_items = next((m.max_length for m in Batch.model_fields[items].metadata
                               if getattr(m, "max_length", None)), None)

    @staticmethod
    def _raise(err: ValidationError, body: Any, prefix: tuple = ()) -> None:
        errors = [{**e, "loc": ("body", *prefix, *e["loc"])} for e in err.errors()]
        raise RequestValidationError(errors, body=body) from None

    def read(self, raw: bytes) -> list[BaseModel]:
        try:
            obj = json.loads(raw.decode("utf-8-sig"))
        except UnicodeDecodeError as err:
            raise HTTPException(400, f"body: not UTF-8 (byte {err.start}); JSON over HTTP is UTF-8") from None
        except json.JSONDecodeError as err:
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body", err.pos), "msg": "JSON decode error",
                                           "input": {}, "ctx": {"error": err.msg}}], body=err.doc) from None
        items = obj.get(self.items) if isinstance(obj, dict) else None
        if not (isinstance(items, list) and 1 <= len(items) <= (self.max_items or len(items))):
            try:  # a wrong shape: the model's own error (cheap: no records are validated one by one)
                self.Batch.model_validate(obj)
            except ValidationError as err:
                self._raise(err, obj)
        try:  # the envelope (unknown keys) with one record, then every record in chunks
            self.Batch.model_validate({**obj, self.items: items[:1]})
        except ValidationError as err:
            self._raise(err, obj)
        out: list[BaseModel] = []
        errors: list[dict[str, Any]] = []
        for s in range(0, len(items), CHUNK):
            try:
                out += self.records.validate_python(items[s: s + CHUNK])
            except ValidationError as err:
                errors += [{**e, "loc": ("body", self.items, e["loc"][0] + s, *e["loc"][1:])} for e in err.errors()]
        if errors:
            raise RequestValidationError(errors, body=obj)
        return out


def answer_chunks(svc: Any, X: np.ndarray, t0: float, dump: TypeAdapter, on_chunk: Any,
                  cancelled: threading.Event | None = None, start: int = 0) -> None:
    """Answer encoded records ``CHUNK`` at a time from record ``start`` (a multiple of ``CHUNK``;
    ``svc.recommend``, counted, made JSON-ready), handing each chunk's answers, validated and dumped by
    ``dump``, to ``on_chunk(answers)``."""
    for s in range(start, len(X), CHUNK):
        if cancelled is not None and cancelled.is_set():
            return
        Xc = X[s: s + CHUNK]
        worker = getattr(svc, "batch_worker", None)  # serving/batch_worker.py: the chunk in its own process
        ans = worker.recommend(Xc, 0, svc.recommend) if worker is not None else svc.recommend(Xc)
        svc.count(ans)
        on_chunk(dump.dump_python(dump.validate_python(svc.records(Xc, ans, t0)), mode="json", by_alias=True))
        time.sleep(0)  # let a waiting request thread have the GIL now rather than at the next switch


class _JobState:
    def __init__(self, total: int, job_id: str | None = None):
        self.id, self.total = job_id or uuid.uuid4().hex, total
        self.created = time.time()
        self.status: str = "queued"
        self.results: list[Any] = []
        self.counts: dict[str, int] = {}
        self.error: str | None = None
        self.finished_at: float | None = None
        self.cancel = threading.Event()


class JobStore:
    """The batch jobs of one app: run one at a time on their own thread, kept a while when finished."""

    def __init__(self, svc: Any, dump: TypeAdapter, *, max_jobs: int = MAX_JOBS, keep: int = KEEP_JOBS,
                 ttl_s: float = JOB_TTL_S, directory: str | Path | None = None):
        self.svc, self.dump, self.max_jobs, self.keep, self.ttl_s = svc, dump, max_jobs, keep, ttl_s
        self.jobs: OrderedDict[str, _JobState] = OrderedDict()
        self.lock = threading.Lock()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-jobs")
        # ``directory``: every accepted job and its finished chunks on disk (serving/job_files.py); a store
        # opened on it again resumes the jobs a stopped or killed server left queued or running.
        self.files = JobFiles(directory) if directory is not None else None
        if self.files is not None:
            self._restore()

    def _meta(self, job: _JobState) -> dict[str, Any]:
        return {"id": job.id, "total": job.total, "status": job.status, "error": job.error,
                "created": job.created, "finished_at": job.finished_at}

    def _save_meta(self, job: _JobState) -> None:
        if self.files is not None:
            self.files.write_meta(job.id, self._meta(job))

    def _restore(self) -> None:
        """Load the stored jobs: finished ones with their answers, the others queued again from their first
        missing chunk (in the order they were accepted)."""
        for meta in self.files.stored():
            job = _JobState(int(meta["total"]), meta["id"])
            job.created, job.error = meta.get("created", job.created), meta.get("error")
            for chunk in self.files.chunks(job.id):
                self._keep(job, chunk)
            self.jobs[job.id] = job
            if meta["status"] in ("queued", "running") and len(job.results) < job.total:
                self.executor.submit(self._run, job, self.files.records(job.id))
            else:
                job.status = "done" if meta["status"] in ("queued", "running") else meta["status"]
                job.finished_at = meta.get("finished_at") or time.time()
                self._save_meta(job)
        self._expire()

    def _expire(self) -> None:
        now = time.time()
        finished = [j for j in self.jobs.values() if j.finished_at is not None]
        gone = finished[: max(0, len(finished) - self.keep)]
        gone += [j for j in finished[len(gone):] if now - j.finished_at > self.ttl_s]
        for j in gone:
            del self.jobs[j.id]
            if self.files is not None:
                self.files.remove(j.id)

    def submit(self, X: np.ndarray) -> _JobState:
        """Queue a job for encoded records (HTTPException 429 when :data:`MAX_JOBS` are already waiting)."""
        with self.lock:
            self._expire()
            active = sum(j.finished_at is None for j in self.jobs.values())
            if active >= self.max_jobs:
                raise HTTPException(429, f"jobs: {active} jobs are queued or running (at most {self.max_jobs}); "
                                         "retry when one has finished", headers={"Retry-After": "10"})
            job = _JobState(len(X))
            if self.files is not None:  # on disk before it is acknowledged: a restart will finish it
                self.files.create(job.id, X, self._meta(job))
            self.jobs[job.id] = job
        self.executor.submit(self._run, job, X)
        return job

    def _keep(self, job: _JobState, answers: list[Any]) -> None:
        with self.lock:
            job.results += answers
            for a in answers:
                job.counts[a["status"]] = job.counts.get(a["status"], 0) + 1

    def _run(self, job: _JobState, X: np.ndarray) -> None:
        if job.cancel.is_set():
            return
        job.status = "running"
        self._save_meta(job)

        def keep(answers: list[Any]) -> None:
            if self.files is not None and not job.cancel.is_set():
                self.files.write_chunk(job.id, len(job.results) // CHUNK, answers)
            self._keep(job, answers)

        try:
            answer_chunks(self.svc, X, time.perf_counter(), self.dump, keep, job.cancel, start=len(job.results))
            job.status = "cancelled" if job.cancel.is_set() else "done"
        except Exception as err:  # logged by the caller's logger; the job says why it stopped
            if job.cancel.is_set():  # deleted while its chunk was written: nothing to report
                job.status = "cancelled"
            else:
                log.exception("batch job %s failed", job.id)
                job.status, job.error = "failed", f"internal error ({type(err).__name__}); see the server log"
        finally:
            job.finished_at = time.time()
            if not job.cancel.is_set():
                self._save_meta(job)

    def get(self, job_id: str) -> _JobState:
        with self.lock:
            self._expire()
            job = self.jobs.get(job_id)
        if job is None:
            raise HTTPException(404, f"id: no job {job_id!r} (unknown, or finished more than {self.ttl_s:g} s ago)")
        return job

    def page(self, job: _JobState, offset: int, limit: int) -> dict[str, Any]:
        with self.lock:
            return {"id": job.id, "status": job.status, "total": job.total, "done": len(job.results),
                    "counts": dict(job.counts), "error": job.error, "offset": offset,
                    "results": job.results[offset: offset + limit]}

    def cancel(self, job_id: str) -> _JobState:
        """Cancel a job (a running one stops after its chunk) and delete it with its answers, in memory
        and on disk: a later ``get`` is 404."""
        job = self.get(job_id)
        job.cancel.set()
        with self.lock:
            if job.status in ("queued", "running"):
                job.status = "cancelled"
            job.finished_at = job.finished_at or time.time()
            self.jobs.pop(job.id, None)
        if self.files is not None:
            self.files.remove(job.id)
        return job

    def close(self) -> None:
        """Cancel every job (for a shutdown): the running one stops after its chunk."""
        with self.lock:
            jobs = list(self.jobs.values())
        for j in jobs:
            j.cancel.set()
        self.executor.shutdown(wait=False, cancel_futures=True)


def install_batch_routes(app: FastAPI, svc: Any, Batch: type[BaseModel], Result: type[BaseModel],
                         BatchResponse: type[BaseModel], errors: dict[int | str, Any], items: str = "records",
                         jobs_dir: str | Path | None = None) -> JobStore:
    """``POST /recommend/batch``, ``POST /jobs``, ``GET /jobs/{id}`` and ``DELETE /jobs/{id}`` for a
    raw-record service ``svc`` (``parse``, ``recommend``, ``count``, ``records``); returns the job store
    (closed with the app)."""
    reader = _Reader(Batch, items)
    dump = TypeAdapter(list[Result])  # type: ignore[valid-type]
    jobs = JobStore(svc, dump, directory=jobs_dir)
    model = errors[413]["model"]  # the error body every status shares
    job_errors = {404: {"model": model, "description": "no such job (unknown, or finished over an hour ago)"},
                  413: errors[413], 422: {"model": model, "description": "offset or limit out of range"},
                  500: errors[500]}
    body_doc = {"requestBody": {"required": True,
                                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{Batch.__name__}"}}}}}

    def parse(raw: bytes) -> np.ndarray:
        return svc.parse([r.model_dump(by_alias=True) for r in reader.read(raw)], items)

    def answer(raw: bytes) -> bytes:
        t0 = time.perf_counter()
        X = parse(raw)
        parts: list[bytes] = []
        counts: dict[str, int] = {}

        def keep(answers: list[Any]) -> None:
            for a in answers:
                counts[a["status"]] = counts.get(a["status"], 0) + 1
            parts.append(json.dumps(answers, separators=(",", ":"))[1:-1].encode())

        answer_chunks(svc, X, t0, dump, keep)
        return b'{"results":[' + b",".join(p for p in parts if p) + b'],"counts":' + json.dumps(counts).encode() + b"}"

    @app.post("/recommend/batch", response_model=BatchResponse, summary="Recommend for a batch of raw records "
              f"(answered {CHUNK} at a time off the event loop)", responses=errors, openapi_extra=body_doc)
    async def recommend_batch(request: Request) -> Response:
        raw = await request.body()
        return Response(await run_in_threadpool(answer, raw), media_type="application/json")

    @app.post("/jobs", response_model=Job, status_code=202, summary="Start a batch job (poll GET /jobs/{id})",
              responses={**errors, 429: {"model": model, "description": "too many jobs queued or running"}},
              openapi_extra=body_doc)
    async def start_job(request: Request) -> JSONResponse:
        raw = await request.body()
        X = await run_in_threadpool(parse, raw)
        job = jobs.submit(X)
        return JSONResponse(jobs.page(job, 0, 0), status_code=202, headers={"Location": f"/jobs/{job.id}"})

    @app.get("/jobs/{job_id}", response_model=Job, summary="A batch job's progress and a page of its answers",
             responses=job_errors)
    def job_status(job_id: str, offset: int = Query(0, ge=0, description="first answer to return"),
                   limit: int = Query(PAGE, ge=0, le=PAGE, description=f"answers to return (at most {PAGE})")
                   ) -> dict[str, Any]:
        return jobs.page(jobs.get(job_id), offset, limit)

    @app.delete("/jobs/{job_id}", response_model=Job, summary="Cancel a batch job and delete it with its answers "
                "(a later GET is 404)",
                responses=job_errors)
    def cancel_job(job_id: str) -> dict[str, Any]:
        return jobs.page(jobs.cancel(job_id), 0, 0)

    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:  # the batch body's schema, which no typed parameter declares now
        if app.openapi_schema is None:
            schema = default_openapi()
            body = Batch.model_json_schema(ref_template="#/components/schemas/{model}")
            comps = schema.setdefault("components", {}).setdefault("schemas", {})
            comps.update(body.pop("$defs", {}))
            comps[Batch.__name__] = body
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return jobs
