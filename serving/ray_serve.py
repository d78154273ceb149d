"""The served app on Ray Serve: replicas, autoscaling, a replica replaced without a failed request (issue 57 item 1).

    python serve.py runs/NAME --ray-serve [--address local|auto|HOST:6379] [--replicas 2 | --autoscale 1:4]

One Ray Serve application at route ``/`` behind Ray Serve's own HTTP proxy, of three deployments:

- ``RecourseApp`` (``--replicas N``, or autoscaled between MIN and MAX on the ongoing requests per
  replica): each replica builds the run's app with serve.py's own builder (the same ``create_*_app``,
  the same kernel compile and warm-up, its own fallback process and, for a tabular run, its own batch
  worker) behind a :class:`~serving.startup.StartingApp`, so it answers every route, the page, ``/livez``
  and ``/readyz`` exactly as one ``serve.py`` process does. Ray routes a request to it only once its
  constructor (the build) has returned; its ``check_health`` asks the app's ``/readyz``.
- ``RecourseJobs`` (tabular and sequential runs, one replica): the same app, the only one that owns the
  jobs directory (``--jobs-dir``, default ``RUN/jobs``), so ``GET /jobs/{id}`` always reaches the replica
  that accepted the job; Ray replaces it if it dies and the replacement resumes the jobs from disk.
- ``RecourseIngress`` (as many replicas as the app): the HTTP entry point. It forwards each request
  unchanged (method, path, query, headers, body) through a ``DeploymentHandle`` (Ray's router picks the
  replica) and returns the app's status, headers and body byte for byte. A request whose replica died
  under it (``ray.kill``, a crash, a lost node) is sent again through the router, which no longer picks the
  dead replica: every request but ``POST /jobs`` is idempotent (an answer depends only on the run), so a
  client sees no error while Ray starts a replacement. ``POST /jobs`` is not repeated (it would accept the
  job twice): it answers 503 with ``Retry-After`` instead.

Ray is an optional extra, imported here only when called (``pip install -e '.[ray]'``, which includes
``ray[serve]``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from envs.optional import MissingExtraError, require
from serving.startup import StartingApp

log = logging.getLogger("recourse_gym.serve")

APP_NAME = "recourse"
RETRIES = 3  # times the ingress sends an idempotent request again after its replica died
APP_MAX_ONGOING = 64  # requests one app replica takes at once (Ray's default of 5 would queue small requests behind batches)
INGRESS_MAX_ONGOING = 512
HEALTH_PERIOD_S = 5.0
HEALTH_TIMEOUT_S = 30.0
CONSTRUCTOR_RETRIES = 3  # a run that cannot be built fails the deployment after this many tries, not Ray's 20

Build = Callable[[Callable[[str], None]], Any]  # serve.py's builders: build(set_phase) -> the ASGI app
PACKAGES = ("envs", "solvers", "data_gen", "learners", "evaluation", "serving")  # importable on every node


class RayServeError(RuntimeError):
    """The deployment could not be made (bad options, or a replica that cannot build the app); one line."""


def _modules() -> tuple[Any, Any]:
    """``ray`` and ``ray.serve``, or a :class:`MissingExtraError` naming the extra."""
    ray = require("ray", "--ray-serve")
    try:
        from ray import serve
    except ImportError as err:
        raise MissingExtraError("--ray-serve needs Ray Serve, which is not installed: pip install -e '.[ray]' "
                                f"(or pip install 'ray[serve]=={ray.__version__}')") from err
    return ray, serve


def parse_autoscale(text: str) -> tuple[int, int]:
    """``MIN:MAX`` (replicas, 0 <= MIN <= MAX, MAX >= 1) as two integers; ValueError in one line otherwise."""
    lo, sep, hi = text.partition(":")
    try:
        bounds = int(lo), int(hi)
    except ValueError:
        bounds = (-1, -1)
    if not sep or bounds[0] < 0 or bounds[1] < max(1, bounds[0]):
        raise ValueError(f"--autoscale: expected MIN:MAX replicas with 0 <= MIN <= MAX and MAX >= 1, got {text!r}")
    return bounds


# ------------------------------------------------------------------------------------------ in a replica

async def call_asgi(app: Any, method: str, path: str, query: bytes, headers: list[tuple[bytes, bytes]], body: bytes,
                    *, raw_path: bytes | None = None, client: tuple[str, int] | None = None
                    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """One HTTP request through an ASGI app in this process: (status, headers, body), as a server sends them."""
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": raw_path or path.encode(),
             "query_string": query, "root_path": "", "headers": [(bytes(k), bytes(v)) for k, v in headers],
             "client": tuple(client) if client else None, "server": None, "state": {}}
    done = asyncio.Event()
    sent = False
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the client stays connected until the answer is complete
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                done.set()

    try:
        await app(scope, receive, send)
    except Exception:  # Starlette re-raises after its 500 answer went out; one that did not is answered here
        if not start:
            log.exception("unexpected error on %s %s", method, path)
            raw = json.dumps({"detail": "internal error; see the replica's log"}).encode()
            return 500, [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())], raw
    finally:
        done.set()
    return int(start.get("status", 500)), [(bytes(k), bytes(v)) for k, v in start.get("headers", [])], b"".join(chunks)


class _Lifespan:
    """Drives an ASGI app's lifespan (startup, shutdown) on the running event loop, as a server does."""

    def __init__(self, app: Any):
        self._app = app
        self._to_app: asyncio.Queue = asyncio.Queue()
        self._from_app: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Future | None = None

    async def startup(self) -> None:
        self._task = asyncio.ensure_future(self._app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
                                                     self._to_app.get, self._from_app.put))
        await self._to_app.put({"type": "lifespan.startup"})
        await self._from_app.get()

    @property
    def running(self) -> bool:
        """Started and not shut down."""
        return self._task is not None

    async def shutdown(self, timeout_s: float = 30.0) -> None:
        if self._task is None:
            return
        await self._to_app.put({"type": "lifespan.shutdown"})
        try:
            await asyncio.wait_for(self._from_app.get(), timeout=timeout_s)
        except TimeoutError:
            self._task.cancel()
        self._task = None


class RecourseReplica:
    """One replica of the app: built by ``build`` (serve.py's builder) in the constructor, off the event loop."""

    async def __init__(self, build: Build, role: str = "app", log_level: str = "info"):
        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.role = role
        self.app = StartingApp(build, name=f"recourse-gym ({role})")
        self._lifespan = _Lifespan(self.app)
        await self._lifespan.startup()  # starts the build thread; the real app's startup runs here once built
        await asyncio.to_thread(self.app.wait)
        if self.app.error:  # Ray retries the constructor a few times, then reports the deployment failed
            await self._lifespan.shutdown()
            raise RayServeError(f"starting failed: {self.app.error}")
        log.info("%s replica ready (pid %d) after %.1f s", role, os.getpid(), self.app.ready_after or 0.0)
        if os.getpriority(os.PRIO_PROCESS, 0) > 0:
            log.warning("this replica runs at nice %d (Ray's worker niceness): it yields to every other process; "
                        "start the Ray nodes with RAY_worker_niceness=0", os.getpriority(os.PRIO_PROCESS, 0))

    async def forward(self, method: str, path: str, query: bytes, headers: list[tuple[bytes, bytes]], body: bytes,
                      raw_path: bytes | None = None, client: tuple[str, int] | None = None
                      ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """The app's answer to one HTTP request (the ingress sends them here)."""
        return await call_asgi(self.app, method, path, query, headers, body, raw_path=raw_path, client=client)

    async def check_health(self) -> None:
        """Ray Serve's health check: the app's own readiness (``GET /readyz``); a replica that fails it is replaced."""
        status, _, body = await call_asgi(self.app, "GET", "/readyz", b"", [], b"")
        if status != 200:
            raise RayServeError(f"{self.role} replica not ready: {body[:300].decode(errors='replace')}")

    def __del__(self) -> Any:
        """Ray Serve's graceful stop: the app's shutdown (its jobs, fallback process and batch worker), as a
        coroutine Ray awaits on the replica's loop; None once it ran (so the garbage collector's call is a no-op)."""
        lifespan = getattr(self, "_lifespan", None)
        return self._stop(lifespan) if lifespan is not None and lifespan.running else None

    async def _stop(self, lifespan: _Lifespan) -> None:
        log.info("%s replica stopping (pid %d): the app's shutdown", self.role, os.getpid())
        await lifespan.shutdown()
        log.info("%s replica stopped", self.role)


class RecourseIngress:
    """The HTTP entry point: each request forwarded to an app replica by Ray's router, again if that replica died."""

    def __init__(self, app: Any, jobs: Any = None):
        self._app, self._jobs = app, jobs

    async def __call__(self, request: Any) -> Any:
        from ray.exceptions import RayActorError
        from starlette.responses import JSONResponse, Response

        try:
            from ray.serve.exceptions import ReplicaUnavailableError
        except ImportError:  # an older Ray: a dead replica shows as RayActorError alone
            ReplicaUnavailableError = RayActorError  # noqa: N806

        scope = request.scope
        path = scope["path"]
        to_jobs = self._jobs is not None and (path == "/jobs" or path.startswith("/jobs/"))
        handle = self._jobs if to_jobs else self._app
        tries = 1 if (to_jobs and request.method == "POST") else 1 + RETRIES
        body = await request.body()
        client = scope.get("client")
        args = (request.method, path, scope.get("query_string", b""), list(scope.get("headers", [])), body,
                scope.get("raw_path"), tuple(client) if client else None)
        for attempt in range(tries):
            try:
                status, headers, content = await handle.forward.remote(*args)
                break
            except (RayActorError, ReplicaUnavailableError) as err:
                log.warning("%s %s: its replica stopped (%s); %s", request.method, path, type(err).__name__,
                            "sending it again" if attempt + 1 < tries else "answering 503")
        else:
            return JSONResponse({"detail": "replica: the replica answering this request stopped; send it again"},
                                status_code=503, headers={"retry-after": "1"})
        # The app's own headers as it sent them, less its X-Request-ID where it echoes the proxy's (the proxy adds it).
        rid = dict(args[3]).get(b"x-request-id")
        response = Response(content, status_code=status)
        response.raw_headers = [(bytes(k), bytes(v)) for k, v in headers
                                if not (k.lower() == b"x-request-id" and bytes(v) == rid)]
        return response


# ---------------------------------------------------------------------------------------------- the driver

def application(build: Build, *, jobs_build: Build | None = None, replicas: int = 2,
                autoscale: tuple[int, int] | None = None, target_ongoing: float = 2.0,
                replica_cpus: float = 1.0, log_level: str = "info") -> Any:
    """The Ray Serve application (``serve.run`` it).

    build: serve.py's builder of the app for the replicas (jobs in memory; they never reach them).
    jobs_build: the builder of the jobs owner (its jobs directory); None: no jobs routes (capability runs).
    replicas: app replicas, when not autoscaled.
    autoscale: (MIN, MAX) replicas, scaled by Ray Serve on the ongoing requests per replica.
    target_ongoing: with autoscale, the ongoing requests per replica the autoscaler aims at.
    replica_cpus: CPUs each app replica reserves on the cluster (Ray's scheduling; the ingress and the jobs owner 0).
    log_level: the replicas' log level (serve.py's --log-level).
    """
    ray, serve = _modules()
    for b in (build, jobs_build):  # a builder of a script (serve.py imported as a module) travels by value, as from __main__
        mod = sys.modules.get(getattr(b, "__module__", None) or "")
        if mod is not None and mod.__name__ != "__main__" and mod.__name__.split(".")[0] not in PACKAGES:
            ray.cloudpickle.register_pickle_by_value(mod)
    _check(replicas, target_ongoing)
    common = {"health_check_period_s": HEALTH_PERIOD_S, "health_check_timeout_s": HEALTH_TIMEOUT_S,
              "max_constructor_retry_count": CONSTRUCTOR_RETRIES}
    if autoscale is None:
        scale: dict[str, Any] = {"num_replicas": replicas}
        front: dict[str, Any] = {"num_replicas": replicas}
    else:
        lo, hi = autoscale
        scale = {"autoscaling_config": {"min_replicas": lo, "max_replicas": hi, "initial_replicas": max(lo, 1),
                                        "target_ongoing_requests": target_ongoing}}
        front = {"autoscaling_config": {"min_replicas": max(lo, 1), "max_replicas": hi,
                                        "target_ongoing_requests": 4 * target_ongoing}}
    app = serve.deployment(RecourseReplica, name="RecourseApp").options(
        max_ongoing_requests=APP_MAX_ONGOING, ray_actor_options={"num_cpus": replica_cpus}, **scale,
        **common).bind(build, "app", log_level)
    jobs = None
    if jobs_build is not None:
        jobs = serve.deployment(RecourseReplica, name="RecourseJobs").options(
            num_replicas=1, max_ongoing_requests=APP_MAX_ONGOING, ray_actor_options={"num_cpus": 0},
            **common).bind(jobs_build, "jobs", log_level)
    return serve.deployment(RecourseIngress, name="RecourseIngress").options(
        max_ongoing_requests=INGRESS_MAX_ONGOING, ray_actor_options={"num_cpus": 0}, **front).bind(app, jobs)


def _check(replicas: int, target_ongoing: float) -> None:
    if replicas < 1:
        raise RayServeError(f"--replicas: expected at least 1, got {replicas}")
    if target_ongoing <= 0:
        raise RayServeError(f"--target-ongoing: expected a positive number, got {target_ongoing:g}")


def connect(address: str = "local", *, cpus: int | None = None) -> bool:
    """Join the Ray cluster at ``address`` ('auto': the one ``ray start`` runs here; 'HOST:6379': its head) or, for
    'local', start one here with ``cpus`` logical CPUs (default: this machine's). True when this call started Ray."""
    from data_gen.compute import ray_environment

    ray, _ = _modules()
    if ray.is_initialized():
        return False
    # a local instance's workers at nice 0, not Ray's 15: a replica would then yield to every other process of the
    # machine, and to nothing of its own (its fallback child sits at nice 10); replicas run at 0, as serve.py
    ray_environment(local=address == "local")
    if address == "local":
        ray.init(address="local", num_cpus=cpus or os.cpu_count() or 1, include_dashboard=False)
        return True
    ray.init(address=address)
    return False


def _why(serve: Any, err: Exception) -> str:
    """The one line that says why the deployment failed: a replica's "starting failed: ..." where there is one."""
    texts = [str(err)]
    try:
        app = serve.status().applications.get(APP_NAME)
        texts += [d.message for d in app.deployments.values()] if app is not None else []
    except Exception:  # the status is a courtesy; the error itself is reported anyway
        pass
    lines = [line.strip() for t in texts for line in t.splitlines() if line.strip()]
    found = [line[line.index("starting failed"):] for line in lines if "starting failed" in line]
    return (found or lines or ["unknown"])[-1][:400]


def serve_on_ray(build: Build, *, jobs_build: Build | None = None, address: str = "local", host: str = "127.0.0.1",
                 port: int = 8000, replicas: int = 2, autoscale: tuple[int, int] | None = None,
                 target_ongoing: float = 2.0, replica_cpus: float = 1.0, log_level: str = "info",
                 stop: threading.Event | None = None) -> int:
    """``serve.py --ray-serve``: deploy :func:`application` on the cluster, serve until SIGTERM / SIGINT (or
    ``stop``), then delete it (and stop Ray if it was started here). Returns the exit status.

    address: the Ray cluster (see :func:`connect`). host, port: where Ray Serve's HTTP proxy listens (on each node).
    The other keyword arguments are :func:`application`'s.
    """
    ray, serve = _modules()
    _check(replicas, target_ongoing)  # before Ray starts
    most = autoscale[1] if autoscale else replicas
    started = connect(address, cpus=max(os.cpu_count() or 1, int(most * replica_cpus + 0.999)))
    try:
        t0 = time.monotonic()
        serve.start(http_options={"host": host, "port": port})
        app = application(build, jobs_build=jobs_build, replicas=replicas, autoscale=autoscale,
                          target_ongoing=target_ongoing, replica_cpus=replica_cpus, log_level=log_level)
        try:  # Ray's own access lines off: the app writes one per request (serving/observability.py)
            serve.run(app, name=APP_NAME, route_prefix="/",
                      logging_config={"log_level": log_level.upper(), "enable_access_log": False})
        except RuntimeError as err:
            why = _why(serve, err)
            serve.delete(APP_NAME)  # not left failing on a cluster that outlives this command
            raise RayServeError(f"ray serve: the deployment failed: {why}") from None
        shape = (f"{autoscale[0]}-{autoscale[1]} replicas (autoscaled)" if autoscale
                 else f"{replicas} replica{'s' if replicas > 1 else ''}")
        print(f"serving on Ray Serve at http://{host}:{port} ({shape}; ready after {time.monotonic() - t0:.1f} s); "
              "SIGTERM or Ctrl-C stops it", flush=True)
        stop = stop or threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                signal.signal(sig, lambda *_: stop.set())
            except ValueError:  # not the main thread (tests): ``stop`` alone ends it
                pass
        while not stop.wait(0.5):  # a timed wait: the signal handlers run between the waits
            pass
        print("stopping: deleting the Ray Serve application", flush=True)
        serve.delete(APP_NAME)
        return 0
    finally:
        if started:
            try:
                serve.shutdown()
            finally:
                ray.shutdown()
