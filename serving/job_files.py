"""Batch jobs kept on disk, so that a restart loses no accepted work (issue 57 item 6).

A job directory ``<jobs_dir>/<id>/`` holds

- ``records.npy``: the job's encoded records, written (atomically) before ``POST /jobs`` answers 202;
- ``meta.json``: id, total, status, error, created and finished times;
- ``chunk-<k>.json``: the answers of chunk ``k`` (``CHUNK`` records), each written atomically when the
  chunk is answered.

A server started on the same directory (:meth:`JobFiles.pending`) finds every job that was queued or
running, and the job resumes at its first missing chunk: finished chunks are never answered twice, and a
record's answer is what the uninterrupted run would have given (the same ``svc.recommend`` on the same
rows). ``DELETE /jobs/{id}`` removes the directory (a later ``GET`` is 404); a finished job's directory
is removed :data:`serving.jobs.JOB_TTL_S` seconds after it finished.

Writes go to a temporary file in the same directory and are renamed into place (``os.replace``), so a
kill at any instant leaves either the old file or the new one, never a torn one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class JobFiles:
    """The on-disk half of a job store: one directory per job under ``root``."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        # a job's writes and its removal one at a time (a write checks the directory is still there): a chunk
        # written while a cancel removed the directory brought it back (rmtree cannot remove a directory a new
        # file just entered)
        self._lock = threading.Lock()
        self.root.mkdir(parents=True, exist_ok=True)

    def _dir(self, job_id: str) -> Path:
        if not job_id.isalnum():  # ids are uuid hex: nothing else may name a path
            raise ValueError(f"id: {job_id!r} is not a job id")
        return self.root / job_id

    def create(self, job_id: str, X: np.ndarray, meta: dict[str, Any]) -> None:
        """The job's records and first meta, both on disk before the job is acknowledged."""
        d = self._dir(job_id)
        tmp = self.root / f".{job_id}.new"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        with open(tmp / "records.npy", "wb") as f:
            np.save(f, np.asarray(X, np.float64), allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        (tmp / "meta.json").write_text(json.dumps(meta))
        os.replace(tmp, d)  # the job appears whole or not at all

    def write_meta(self, job_id: str, meta: dict[str, Any]) -> None:
        d = self._dir(job_id)
        with self._lock:
            if d.exists():
                _atomic_write(d / "meta.json", json.dumps(meta).encode())

    def write_chunk(self, job_id: str, k: int, answers: list[Any]) -> None:
        d = self._dir(job_id)
        with self._lock:
            if d.exists():
                _atomic_write(d / f"chunk-{k:06d}.json", json.dumps(answers, separators=(",", ":")).encode())

    def chunks(self, job_id: str) -> list[list[Any]]:
        """The answered chunks in order, up to the first missing one."""
        d, out, k = self._dir(job_id), [], 0
        while (d / f"chunk-{k:06d}.json").exists():
            out.append(json.loads((d / f"chunk-{k:06d}.json").read_text()))
            k += 1
        return out

    def records(self, job_id: str) -> np.ndarray:
        return np.load(self._dir(job_id) / "records.npy", allow_pickle=False)

    def remove(self, job_id: str) -> None:
        with self._lock:
            shutil.rmtree(self._dir(job_id), ignore_errors=True)

    def stored(self) -> list[dict[str, Any]]:
        """The meta of every whole job directory, oldest first (half-created ones are dropped)."""
        out = []
        for d in self.root.iterdir():
            if d.name.startswith("."):  # a job whose creation was interrupted: never acknowledged
                shutil.rmtree(d, ignore_errors=True)
                continue
            try:
                out.append(json.loads((d / "meta.json").read_text()))
            except (OSError, ValueError):
                shutil.rmtree(d, ignore_errors=True)
        return sorted(out, key=lambda m: m.get("created", 0.0))
