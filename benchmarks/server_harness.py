"""The serving benchmarks' server harness: ``serve.py`` in a subprocess on loopback, started, waited
for and stopped (``benchmarks/serving.py``, ``serving_load.py`` and ``serving_tabular.py`` use it)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(run_dir: Path, model: str | None, port: int, max_batch: int, log: Path,
                 timeout: float, extra: list[str] | None = None) -> subprocess.Popen:
    """``serve.py run_dir`` on 127.0.0.1:``port``, its stderr in ``log``, once ``/health`` answers 200."""
    cmd = [sys.executable, str(ROOT / "serve.py"), str(run_dir), "--host", "127.0.0.1", "--port", str(port),
           "--max-batch", str(max_batch), "--log-level", "warning"] + (["--model", model] if model else []) + (extra or [])
    with log.open("w") as f:  # a file, not a pipe: a full pipe would block the server
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=f)
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    stop_server(proc)
    raise RuntimeError(f"server did not answer /health within {timeout:.0f}s")


BIND_FAILURES = ("Failed to bind", "address already in use")  # a port taken between ``free_port`` and the bind
PORT_TRIES = 3  # ports tried by ``start_on_free_port``


def start_on_free_port(run_dir: Path, model: str | None, max_batch: int, log: Path, timeout: float,
                       extra: list[str] | None = None) -> tuple[subprocess.Popen, int]:
    """``start_server`` on a free port, and the port; another port where the server could not bind the one it was
    given (a free port is free only when probed: Ray starts many processes, each binding ports of its own, before
    its HTTP proxy binds ``port``), up to ``PORT_TRIES`` ports."""
    for attempt in range(PORT_TRIES):
        port = free_port()
        try:
            return start_server(run_dir, model, port, max_batch, log, timeout, extra), port
        except RuntimeError as e:
            if attempt == PORT_TRIES - 1 or not any(w in str(e) for w in BIND_FAILURES):
                raise
    raise AssertionError("unreachable")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
