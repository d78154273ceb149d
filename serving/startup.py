"""A server that listens at once: live while it compiles and loads, ready only after (issue 53, issue 57 item 2).

A fresh replica compiles its numba kernels (a minute or more on an empty cache) and loads its run
before the app exists. Until now it did not listen at all meanwhile, so an orchestrator saw a dead
process. :class:`StartingApp` is the ASGI app uvicorn serves from the first second: it builds the
real app in a background thread (``build(set_phase)``, which reports what it is doing) and answers

- ``GET /livez``: 200 while the process works (starting or ready), 500 if the build failed;
- ``GET /readyz``: 503 with the phase and the seconds so far until the app is built, then 200;
- every other request: 503 with ``Retry-After`` while starting (``/health`` included), then the real
  app's answer.

A progress line goes to the log at each phase ("compiling search kernels (first start only)...").
The real app's lifespan (its shutdown closes the fallback process and the jobs) is driven from the
event loop once it exists, and shut down with the server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("recourse_gym.serve")

PROBES = ("/livez", "/readyz")


class StartingApp:
    """ASGI app: probes at once, the real app (built by ``build(set_phase)`` in a thread) when ready."""

    def __init__(self, build: Callable[[Callable[[str], None]], Any], name: str = "recourse-gym"):
        self._build, self.name = build, name
        self.phase = "starting"
        self.started = time.monotonic()
        self.ready_after: float | None = None  # seconds from start to ready
        self.app: Any = None
        self.error: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inner_lifespan: tuple[asyncio.Queue, asyncio.Queue, asyncio.Task] | None = None
        self._thread: threading.Thread | None = None
        self.on_failure: Callable[[], None] | None = None  # called when the build fails (serve.py: stop the server)

    # ------------------------------------------------------------------------------------ building

    def set_phase(self, phase: str) -> None:
        """Called by the builder: what it is doing now (logged, and shown by /readyz)."""
        self.phase = phase
        log.info("starting: %s (%.1f s)", phase, time.monotonic() - self.started)

    def start(self) -> None:
        """Build the real app in a background thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run_build, name="app-build", daemon=True)
            self._thread.start()

    def _run_build(self) -> None:
        try:
            app = self._build(self.set_phase)
        except BaseException as err:  # reported on /livez; the process stays up for the operator to read it
            self.error = f"{type(err).__name__}: {err}"
            self.phase = "failed"
            log.error("starting failed: %s", self.error)
            if self.on_failure is not None:
                self.on_failure()
            return
        if self._loop is not None:
            # The real app's startup runs on the event loop, before requests reach it.
            asyncio.run_coroutine_threadsafe(self._start_inner(app), self._loop).result()
        self.app = app
        self.ready_after = time.monotonic() - self.started
        self.phase = "ready"
        log.info("ready after %.1f s", self.ready_after)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the build ended (tests, offline use); True when ready."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.app is not None

    # ----------------------------------------------------------------------------------- lifespan

    async def _start_inner(self, app: Any) -> None:
        to_app: asyncio.Queue = asyncio.Queue()
        from_app: asyncio.Queue = asyncio.Queue()
        task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                         to_app.get, from_app.put))
        await to_app.put({"type": "lifespan.startup"})
        await from_app.get()
        self._inner_lifespan = (to_app, from_app, task)

    async def _stop_inner(self) -> None:
        if self._inner_lifespan is not None:
            to_app, from_app, task = self._inner_lifespan
            await to_app.put({"type": "lifespan.shutdown"})
            try:
                await asyncio.wait_for(from_app.get(), timeout=30)
            except TimeoutError:
                task.cancel()

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._loop = asyncio.get_running_loop()
                self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._stop_inner()
                await send({"type": "lifespan.shutdown.complete"})
                return

    # ------------------------------------------------------------------------------------ serving

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": "ready" if self.app is not None else self.phase, "phase": self.phase,
                               "seconds": round(time.monotonic() - self.started, 3)}
        if self.ready_after is not None:
            out["ready_after_s"] = round(self.ready_after, 3)
        if self.error:
            out["error"] = self.error
        return out

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if self._loop is None:  # served without a lifespan (lifespan="off"): start on the first request
            self._loop = asyncio.get_running_loop()
            self.start()
        path = scope.get("path", "")
        if scope["type"] == "http" and path in PROBES:
            if path == "/livez":
                code = 500 if self.error else 200
            else:
                code = 200 if self.app is not None else 503
            await _json(send, code, self.status())
            return
        if self.app is not None:
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return
        detail = (f"starting failed: {self.error}" if self.error
                  else f"starting: {self.phase} ({time.monotonic() - self.started:.0f} s so far); retry shortly")
        await _json(send, 503, {"detail": detail, **self.status()}, {"retry-after": "5"})


async def _json(send: Any, code: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    raw = json.dumps(body).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode()),
            (b"cache-control", b"no-store")] + [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": code, "headers": head})
    await send({"type": "http.response.body", "body": raw})


def warm_up_tabular(svc: Any, n: int = 8) -> float:
    """Answer a few rejected records of the run with its generator (a batch, one record alone, and with
    alternatives), so every kernel the served generator uses is compiled, or loaded from numba's cache,
    before the first request rather than in it. Counters untouched. Returns the seconds it took."""
    import numpy as np

    t0 = time.monotonic()
    rows = None
    if hasattr(svc.run, "domain_rows"):
        try:
            rows = np.asarray(svc.run.domain_rows(), float)
        except Exception as err:  # the run's data is optional here: the probe record still warms up
            log.warning("warm-up: the run's rows are unavailable (%s); using one probe record", err)
    if rows is None or not len(rows):
        rows = svc.example_row()[None]
    rejected = rows[~svc.world.accepts(rows)][:n]
    if not len(rejected):
        rejected = rows[:1]
    kw = {"norm": svc.codec.norm} if "norm" in svc._gen_params else {}
    for X, extra in ((rejected, {}), (rejected[:1], {}), (rejected[:2], {"n_alternatives": 6})):
        if extra and "n_alternatives" not in svc._gen_params:
            continue
        CF, _ = svc.generator.recommend(svc.world, X, **kw, **extra)  # (CF, distances), as the service reads it
        svc.verify(X, np.nan_to_num(np.asarray(CF, float), nan=0.0))
    return time.monotonic() - t0
