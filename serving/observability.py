"""What an operator's monitoring reads: ``GET /metrics`` (Prometheus), a request id, one JSON log line per request.

:func:`instrument` adds to a served app (every run family):

- ``GET /metrics`` in Prometheus's text format (prometheus-client, a registry per app):
  ``recourse_http_requests_total{route,method,status}``, ``recourse_http_request_seconds{route}``
  (a histogram), and read from the service at each scrape: ``recourse_answers_total{method}``
  (generator, geco, mace, fallback; and the outcomes unknown, no_recourse, already_positive),
  ``recourse_verification_failures_total`` (generator answers the checks refused),
  ``recourse_rule_refusals_total{rule}`` (those the world's rules refused, per rule name),
  ``recourse_fallback_restarts_total``, ``recourse_jobs_queue_depth`` (jobs queued or running),
  ``recourse_service_events_total{event}`` (the service's other counters: requests, records, 4xx...);
- a request id per request: the client's ``X-Request-ID`` when it is a short token, else a new one,
  returned in the response's ``X-Request-ID`` header;
- one JSON line per request on the ``recourse_gym.access`` logger: time, request id, method, route
  (the route's template, not the raw path), status, milliseconds, client address.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response

access_log = logging.getLogger("recourse_gym.access")

ANSWER_KEYS = ("generator", "geco", "mace", "fallback", "unknown", "no_recourse", "already_positive")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _ServiceCollector:
    """Reads the service's counters (and the job store's queue) at each scrape: nothing to keep in sync."""

    def __init__(self, svc: Any, jobs: Any = None):
        self.svc, self.jobs = svc, jobs

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        lock = getattr(self.svc, "_lock", None)
        if lock is not None:
            with lock:
                counters = dict(getattr(self.svc, "counters", {}))
        else:
            counters = dict(getattr(self.svc, "counters", {}))
        answers = CounterMetricFamily("recourse_answers", "Answers by the method that gave them, and outcomes",
                                      labels=["method"])
        events = CounterMetricFamily("recourse_service_events", "The service's other counters", labels=["event"])
        for k, v in sorted(counters.items()):
            if k in ANSWER_KEYS:
                answers.add_metric([k], float(v))
            elif k != "generator_invalid":
                events.add_metric([k], float(v))
        yield answers
        yield events
        yield CounterMetricFamily("recourse_verification_failures", "Generator answers the verification refused",
                                  value=float(counters.get("generator_invalid", 0)))
        refusals = CounterMetricFamily("recourse_rule_refusals", "Generator answers the world's rules refused, per rule",
                                       labels=["rule"])
        for k, v in sorted(dict(getattr(self.svc, "rule_refusals", None) or {}).items()):
            refusals.add_metric([k], float(v))
        yield refusals
        yield CounterMetricFamily("recourse_fallback_restarts", "Fallback processes started again after one died",
                                  value=float(getattr(self.svc, "restarts", 0)))
        depth = 0
        if self.jobs is not None:
            with self.jobs.lock:
                depth = sum(j.finished_at is None for j in self.jobs.jobs.values())
        yield GaugeMetricFamily("recourse_jobs_queue_depth", "Batch jobs queued or running", value=float(depth))


class _Observe:
    """ASGI middleware: request id, per-request metrics and the JSON access line."""

    def __init__(self, app: Any, fastapi_app: FastAPI, requests: Any, latency: Any):
        self.app, self.fastapi_app, self.requests, self.latency = app, fastapi_app, requests, latency

    def _route(self, path: str) -> str:
        for r in self.fastapi_app.routes:
            regex = getattr(r, "path_regex", None)
            if regex is not None and regex.match(path):
                return r.path
        return "other"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        rid = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        status = [500]

        async def send_with_id(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            route, seconds = self._route(scope.get("path", "")), time.perf_counter() - t0
            self.requests.labels(route, scope.get("method", ""), str(status[0])).inc()
            self.latency.labels(route).observe(seconds)
            client = scope.get("client")
            access_log.info(json.dumps({
                "ts": round(time.time(), 3), "request_id": rid, "method": scope.get("method"), "route": route,
                "status": status[0], "ms": round(seconds * 1e3, 3), "client": client[0] if client else None}))


def instrument(app: FastAPI, svc: Any, jobs: Any = None) -> Any:
    """Add ``/metrics``, the request id and the access log to ``app`` (see the module); returns the registry."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

    registry = CollectorRegistry()
    requests = Counter("recourse_http_requests", "HTTP requests by route, method and status",
                       ["route", "method", "status"], registry=registry)
    latency = Histogram("recourse_http_request_seconds", "Time to answer a request, by route", ["route"],
                        buckets=LATENCY_BUCKETS, registry=registry)
    registry.register(_ServiceCollector(svc, jobs))

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(_Observe, fastapi_app=app, requests=requests, latency=latency)
    app.state.metrics_registry = registry
    return registry


def operate(app: FastAPI, svc: Any, jobs: Any = None, *, keys: Any = None, rate_limit: float = 50.0) -> None:
    """What every served app gets for its operators: API keys when ``keys`` is given (``serving.keys``;
    ``rate_limit`` requests a second per key), then the metrics, request id and access log outside them,
    so a refused request is counted and logged too."""
    if keys is not None:
        from serving.keys import protect

        protect(app, keys, rate=rate_limit)
    instrument(app, svc, jobs)
