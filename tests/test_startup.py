"""A server that listens at once (serving/startup.py): live while its app is built, ready only after, the
built app's lifespan driven (its shutdown handlers run with the server's), a failed build reported."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
from fastapi import FastAPI

from serving.startup import StartingApp


def _app(closed: list[str]) -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    app.router.add_event_handler("shutdown", lambda: closed.append("closed"))
    return app


def _serve(starting: StartingApp):
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(starting, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.01)
    assert server.started
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_live_at_once_ready_after_the_build_and_the_apps_shutdown_runs():
    gate, closed, phases = threading.Event(), [], []

    def build(set_phase):
        set_phase("compiling")
        phases.append("compiling")
        gate.wait(20)
        set_phase("loading")
        return _app(closed)

    starting = StartingApp(build)
    server, thread, url = _serve(starting)
    try:
        with httpx.Client(base_url=url, timeout=10) as c:
            t0 = time.perf_counter()
            live = c.get("/livez")
            assert live.status_code == 200 and time.perf_counter() - t0 < 2
            ready = c.get("/readyz")
            assert ready.status_code == 503 and ready.json()["phase"] == "compiling"
            busy = c.get("/health")
            assert busy.status_code == 503 and busy.headers["retry-after"] == "5"
            assert "compiling" in busy.json()["detail"]
            gate.set()
            assert starting.wait(20)
            assert c.get("/readyz").status_code == 200 and c.get("/readyz").json()["status"] == "ready"
            assert c.get("/health").json() == {"status": "ok"}
            assert c.get("/livez").status_code == 200
    finally:
        server.should_exit = True
        thread.join(10)
    assert closed == ["closed"] and phases == ["compiling"]


def test_a_failed_build_is_reported_and_stops_the_server():
    stopped = []

    def build(set_phase):
        raise FileNotFoundError("run: runs/x/world/model.json is missing")

    starting = StartingApp(build)
    starting.on_failure = lambda: stopped.append(True)
    server, thread, url = _serve(starting)
    try:
        assert not starting.wait(10) and stopped == [True]
        with httpx.Client(base_url=url, timeout=10) as c:
            live = c.get("/livez")
            assert live.status_code == 500 and "model.json is missing" in live.json()["error"]
            r = c.get("/anything")
            assert r.status_code == 503 and "starting failed" in r.json()["detail"]
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.mark.parametrize("path", ["/livez", "/readyz"])
def test_probes_answer_without_a_lifespan(path):
    """Served with lifespan off (some test servers), the build starts on the first request."""
    from fastapi.testclient import TestClient

    starting = StartingApp(lambda set_phase: _app([]))
    with TestClient(starting) as c:
        assert c.get(path).status_code in (200, 503)
        assert starting.wait(10)
        assert c.get(path).status_code == 200
