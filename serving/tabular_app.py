"""The HTTP service of a tabular run: a FastAPI app around :class:`~serving.tabular.TabularService`.

Endpoints: ``POST /recommend`` (one raw record, optional ``n_diverse``), ``POST /recommend/batch``
(``{"records": [...]}``), ``GET /health`` and ``GET /model``. The request models are built from the
run's encoder (:func:`serving.tabular_schemas.record_models`), so the OpenAPI schema lists every
raw feature with its domain; a request it accepts gets 200, one it rejects a 4xx whose ``detail``
names the field (the error handlers are the capability app's, :func:`serving.app.install_handlers`).
``tests/test_serving_tabular_contract.py`` holds it to that with schemathesis.
"""


import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from serving.app import add_health_and_model, freeze_startup_heap, install_handlers, shutdown
from serving.guard import Guard
from serving.jobs import install_batch_routes
from serving.observability import operate
from serving.tabular import TabularService
from serving.tabular_schemas import (
    TABULAR_ERRORS,
    TabularBatchResponse,
    TabularHealth,
    TabularModelInfo,
    TabularRecommendation,
    record_models,
    to_record,
)


def create_tabular_app(run_dir: str | Path, model: str | None = None, fallback_budget_s: float | None = 0.05,
                       max_batch: int = 10_000, max_diverse: int = 5, *,
                       service: TabularService | None = None, jobs_dir: str | Path | None = None,
                       keys: Any = None, rate_limit: float = 50.0) -> FastAPI:
    """The FastAPI app serving one generator of a tabular run (raises ``ServiceError`` if it cannot);
    ``jobs_dir``: where batch jobs are kept so that a restart finishes them (None: in memory only); ``keys``:
    a ``serving.keys.KeyStore`` (None: no keys), ``rate_limit``: requests a second per key."""
    svc = service or TabularService(run_dir, model, fallback_budget_s, max_batch, max_diverse, fallback_process=True)
    Request, Batch = record_models(svc.codec, svc.max_batch, svc.max_diverse)
    names = ", ".join(svc.codec.names)
    app = FastAPI(title="recourse-gym recommendations (tabular)", version="1",
                  description=f"Verified counterfactual recommendations for raw records of the "
                              f"{svc.tab.get('dataset') or Path(str(svc.tab.get('table'))).name} data set "
                              f"({Path(str(svc.tab.get('model_file'))).name if svc.tab.get('model_file') else svc.tab.get('model')} "
                              "model): the generator "
                              f"'{svc.model_name}' answers, every answer is checked against the model and the "
                              f"schema, and GeCo then MACE take over where it fails, within "
                              f"{'no' if svc.fallback_budget_s is None else f'{svc.fallback_budget_s * 1e3:g} ms of'} "
                              f"budget. Features: {names}. A batch holds at most {svc.max_batch} records.")
    app.add_middleware(Guard, svc=svc, limit=1_000_000 + svc.max_batch * (48 * len(svc.codec.names) + 64))
    app.state.service = svc
    install_handlers(app, svc.max_batch, "records")

    @app.post("/recommend", response_model=TabularRecommendation, summary="Recommend changes for one raw record",
              responses=TABULAR_ERRORS)
    async def recommend(req: Request) -> dict[str, Any]:  # type: ignore[valid-type]
        t0 = time.perf_counter()
        X = svc.parse([to_record(req)], single=True)
        n_div = req.n_diverse  # type: ignore[attr-defined]
        if svc.remote is None:  # in-process generator: answered on the event loop, no thread hand-over
            answers, bad = svc.first_pass(X, n_div)
        else:  # a remote model's round trips wait off the event loop, so requests overlap
            answers, bad = await run_in_threadpool(svc.first_pass, X, n_div)
        if len(bad) or (n_div and any(len(a.alternatives) < n_div for a in answers if a.kind == "generator")):  # only a fallback (which may wait up to the budget) leaves the event loop
            t_end = time.perf_counter() + (float("inf") if svc.fallback_budget_s is None else svc.fallback_budget_s)
            await run_in_threadpool(svc.complete, X, answers, bad, n_div, t_end)
        svc.count(answers)
        return svc.records(X, answers, t0)[0]

    jobs = install_batch_routes(app, svc, Batch, TabularRecommendation, TabularBatchResponse, TABULAR_ERRORS,
                                jobs_dir=jobs_dir)
    shutdown(app, jobs, svc if service is None else None)

    add_health_and_model(app, svc, TabularHealth, TabularModelInfo, what="run")
    from serving.page import add_page  # GET / for people, GET /schema and /example

    add_page(app, svc)
    operate(app, svc, jobs, keys=keys, rate_limit=rate_limit)  # /metrics, request ids, keys
    freeze_startup_heap()
    return app
