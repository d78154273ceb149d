"""Chunk tasks for tests/test_compute.py, in an importable module (Ray workers import them by name)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np


def square(shared: int, chunk: np.ndarray) -> dict[str, np.ndarray]:
    return {"y": chunk ** 2 + shared}


def die_once(shared: str, chunk: np.ndarray) -> dict[str, np.ndarray]:
    """Kills its own worker process the first time it meets chunk 0 (a worker lost mid-run)."""
    marker = Path(shared)
    if chunk[0] == 0 and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return {"y": chunk ** 2}
