"""The HTTP service: a FastAPI app around :class:`~serving.service.RecommendationService`.

Endpoints: ``POST /recommend`` (one agent), ``POST /recommend/batch``, ``GET /health`` and
``GET /model``. The OpenAPI schema (``/openapi.json``, ``/docs``) is the contract: the request
models are built for the served world (:func:`serving.schemas.request_models`), so a request the
schema accepts gets 200 and one it rejects gets a 4xx whose ``detail`` names the field; every
status an operation can return is documented with its body (:data:`serving.schemas.ERRORS`).
``tests/test_serving_contract.py`` holds the service to that with schemathesis.
"""

import gc
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from serving.guard import Guard
from serving.observability import operate
from serving.page import add_page
from serving.schemas import (
    ERRORS,
    INTERNAL,
    TOO_LARGE,
    BatchResponse,
    Health,
    ModelInfo,
    Recommendation,
    request_models,
)
from serving.service import InputError, RecommendationService

log = logging.getLogger("recourse_gym.serve")

MAX_ERRORS = 20  # field errors listed in one 422 response


def _field(loc: Sequence[Any]) -> str:
    """A pydantic error location as the client wrote it: ``agents[3].x[7]``."""
    parts = [p for p in loc if p != "body"] if len(loc) > 1 else list(loc)
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _message(e: dict[str, Any]) -> str:
    """One validation error in words: the problem, and the value where it helps."""
    kind, loc, value = e["type"], tuple(e["loc"]), e.get("input")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field missing"
    if kind in ("too_short", "too_long") and isinstance(value, list):
        ctx = e.get("ctx", {})
        if loc[-1] == "x":  # min_length == max_length == n_features
            return f"expected {ctx.get('min_length', ctx.get('max_length'))} features, got {len(value)}"
        limit = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        what = {"agents": "agent", "records": "record"}.get(str(loc[-1]), "item") + ("" if limit == 1 else "s")
        return f"expected {'at least' if kind == 'too_short' else 'at most'} {limit} {what}, got {len(value)}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        if loc == ("body",) and isinstance(value, bytes | str):
            return "expected a JSON object (send it with Content-Type: application/json)"
        shape = '{"x": [...], "group": id}' if len(loc) == 3 and loc[1] == "agents" else "a JSON object"
        return f"expected {shape}, got {_short(value)}"
    return f"{e['msg']}, got {_short(value)}"


def install_handlers(app: FastAPI, max_batch: int, items: str) -> None:
    """The error handlers every served app shares: 400 for unreadable JSON, 422 naming the field
    (``items`` is the batch's list field, reported once when it exceeds ``max_batch``), 422 for an
    :class:`InputError`, and 500 with no internals for anything unexpected (logged)."""
    def reject(code: int, detail: str, errors: list[dict[str, str]] | None = None) -> JSONResponse:
        body: dict[str, Any] = {"detail": detail}
        if errors:
            body["errors"] = errors
        return JSONResponse(status_code=code, content=body)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        body = exc.body
        if isinstance(body, dict) and isinstance(body.get(items), list) and len(body[items]) > max_batch:
            # The schema's maxItems: one clear message rather than an error per item.
            return reject(422, f"{items}: batch of {len(body[items])} {items} exceeds max_batch={max_batch}")
        errs = exc.errors()
        if errs and errs[0]["type"] == "json_invalid":
            e = errs[0]
            return reject(400, f"body: invalid JSON at position {e['loc'][-1]}: {e.get('ctx', {}).get('error', '')}")
        out = [{"field": _field(e["loc"]), "message": _message(e)} for e in errs[:MAX_ERRORS]]
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        return reject(422, f"{out[0]['field']}: {out[0]['message']}{more}", out)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = str(exc.detail)
        if exc.status_code == 400 and not detail.startswith("body:"):  # FastAPI's: a body it could not read
            cause = exc.__cause__
            detail = "body: cannot be read as JSON" + (f" ({type(cause).__name__}: {cause})" if cause else "")
        headers = exc.headers
        if exc.status_code == 405:  # Starlette lists the first matching route's methods; a path may have several
            path = request.url.path
            allowed = sorted({m for r in request.app.routes if getattr(r, "methods", None)
                              and r.path_regex.match(path) for m in r.methods})
            headers = {**(headers or {}), "Allow": ", ".join(allowed)}
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(InputError)
    async def _bad_input(request: Request, exc: InputError) -> JSONResponse:
        return reject(422, str(exc))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        # The message stays in the log: it may hold paths or internals that are not the client's.
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return reject(500, f"internal error ({type(exc).__name__}); see the server log")


def status_counts(results: list[dict[str, Any]]) -> dict[str, int]:
    """Answers per status of a batch response."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def shutdown(app: FastAPI, *owned: Any) -> None:
    """On the app's shutdown (uvicorn's SIGTERM / SIGINT), ``close()`` each of ``owned`` (None: skipped):
    the batch jobs, and a service the app made itself, with its fallback process."""
    def close() -> None:
        for thing in owned:
            if thing is not None:
                thing.close()

    app.router.add_event_handler("shutdown", close)


def freeze_startup_heap() -> None:
    """Collect once, then leave every object alive now (the model, the libraries, the data) out of all
    later collections (``gc.freeze``): a full collection of that heap held the GIL for 0.3-0.8 s and
    stalled /health while a big batch ran; a collection now takes about a millisecond."""
    gc.collect()
    gc.freeze()


def add_health_and_model(app: FastAPI, svc: Any, health_model: Any = None, info_model: Any = None,
                         what: str = "model") -> None:
    """``GET /health`` (liveness, no work) and ``GET /model`` (``svc.describe()``), as every app serves them."""
    @app.get("/health", response_model=health_model, summary="Liveness", responses={413: TOO_LARGE, 500: INTERNAL})
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": svc.model_name, "uptime_s": time.time() - svc.started}

    @app.get("/model", response_model=info_model, summary=f"The served {what}, its provenance and counters",
             responses={413: TOO_LARGE, 500: INTERNAL})
    def model_info() -> dict[str, Any]:
        return svc.describe()


def create_app(run_dir: str | Path, model: str | None = None, rule: str = "all", seed: int = 0,
               fallback_budget_s: float | None = 0.05, max_batch: int = 10_000, *, keys: Any = None,
               rate_limit: float = 50.0) -> FastAPI:
    """The FastAPI app serving one model of a run (raises :class:`ServiceError` if it cannot); ``keys``: a
    ``serving.keys.KeyStore`` (None: no keys), ``rate_limit``: requests a second per key."""
    svc = RecommendationService(run_dir, model, rule, seed, fallback_budget_s, max_batch)
    w = svc.world
    AgentRequest, BatchRequest = request_models(w.n_features, w.n_groups, max_batch)
    grouped = w.n_groups > 1
    app = FastAPI(title="recourse-gym recommendations", version="1",
                  description="Verified recommendations from a trained CFE generator with an exact fallback. "
                              f"The served world has {w.n_features} capabilities (x: exactly {w.n_features} "
                              f"integers 0/1) and {w.n_groups} group(s); a batch holds at most {max_batch} agents.")
    # Generous for any JSON layout of a full batch; larger bodies get 413 before parsing.
    app.add_middleware(Guard, svc=svc, limit=1_000_000 + max_batch * (16 * w.n_features + 64))
    app.state.service = svc

    install_handlers(app, max_batch, "agents")

    @app.post("/recommend", response_model=Recommendation, summary="Recommend actions for one agent",
              responses=ERRORS)
    async def recommend(req: AgentRequest) -> dict[str, Any]:  # type: ignore[valid-type]
        # Sub-millisecond work on the event loop (no thread hand-offs); only a fallback, which may
        # wait up to the budget, moves to a worker thread.
        X, g = svc.parse_agents([req.x], [req.group] if grouped else None, "x", "group", single=True)
        pending = svc.first_pass(X, g)
        ans = await run_in_threadpool(svc.complete, pending) if len(pending.bad) else svc.complete(pending)
        return svc.records(ans)[0]

    @app.post("/recommend/batch", response_model=BatchResponse, summary="Recommend actions for a batch of agents",
              responses=ERRORS)
    def recommend_batch(req: BatchRequest) -> dict[str, Any]:  # type: ignore[valid-type]
        agents = req.agents
        results = svc.recommend_records([a.x for a in agents], [a.group for a in agents] if grouped else None)
        return {"results": results, "counts": status_counts(results)}

    add_health_and_model(app, svc, Health, ModelInfo)
    add_page(app, svc)  # GET / for people, GET /schema and /example (serving/page.py)
    operate(app, svc, None, keys=keys, rate_limit=rate_limit)  # /metrics, request ids, keys
    freeze_startup_heap()
    return app
