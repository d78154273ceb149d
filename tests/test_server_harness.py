"""``benchmarks/server_harness.py``: a server that could not bind its free port (taken between the probe and the
bind, as Ray's own processes may) is started again on another one; any other failure is raised at once."""

from __future__ import annotations

import pytest

import benchmarks.server_harness as harness


def _starter(failures: list[str]):
    """A ``start_server`` that fails with each of ``failures`` in turn, then starts; the ports it was given."""
    ports = []

    def start(run_dir, model, port, max_batch, log, timeout, extra=None):
        ports.append(port)
        if len(ports) <= len(failures):
            raise RuntimeError(f"server exited with 1: {failures[len(ports) - 1]}")
        return "proc"

    return start, ports


def test_a_port_taken_before_the_bind_is_tried_again_on_another(monkeypatch, tmp_path):
    start, ports = _starter(["RuntimeError: Failed to bind to address '127.0.0.1:34789'."])
    monkeypatch.setattr(harness, "start_server", start)
    proc, port = harness.start_on_free_port(tmp_path, None, 10, tmp_path / "log", 1.0)
    assert proc == "proc" and len(ports) == 2 and port == ports[-1]


def test_other_failures_and_the_last_try_are_raised(monkeypatch, tmp_path):
    start, ports = _starter(["ModuleNotFoundError: No module named 'ray'"])
    monkeypatch.setattr(harness, "start_server", start)
    with pytest.raises(RuntimeError, match="No module named 'ray'"):
        harness.start_on_free_port(tmp_path, None, 10, tmp_path / "log", 1.0)
    assert len(ports) == 1  # not a bind failure: no second port
    start, ports = _starter(["OSError: [Errno 98] address already in use"] * harness.PORT_TRIES)
    monkeypatch.setattr(harness, "start_server", start)
    with pytest.raises(RuntimeError, match="address already in use"):
        harness.start_on_free_port(tmp_path, None, 10, tmp_path / "log", 1.0)
    assert len(ports) == harness.PORT_TRIES
