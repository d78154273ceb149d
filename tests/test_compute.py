"""Chunked jobs on local processes and on Ray: same results, nothing lost to a killed worker or driver."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from data_gen import classifiers
from data_gen.compute import ComputeConfig, chunk_bounds, load_chunk, run_chunks
from data_gen.config import SyntheticDatasetConfig
from data_gen.dataset import build_dataset
from data_gen.mace_labels import label_tabular
from solvers.mace import MACE
from tests.chunk_tasks import die_once, square

ray = pytest.importorskip("ray")  # the ray extra; CI installs it
pytestmark = pytest.mark.usefixtures("ray_cluster")

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(n_features=10, n_actions=20, n_agents=3000, seed=3, chunk_size=500)
RAY = ComputeConfig(backend="ray", n_workers=2)


@pytest.fixture(scope="module")
def compas(tmp_path_factory):
    b = classifiers.build("compas", "lr", cache_dir=tmp_path_factory.mktemp("cache"))
    return b.world, classifiers.negatives(b.world, b.data.X_train)[:24]


@pytest.mark.parametrize("compute", [ComputeConfig(), ComputeConfig(n_workers=2), RAY],
                         ids=["in-process", "processes", "ray"])
def test_backends_give_the_same_chunks(tmp_path, compute):
    chunks = [np.arange(s, e) for s, e in chunk_bounds(10, 3)]
    out = run_chunks(square, 1, chunks, tmp_path, compute=compute, progress=False)
    assert [len(r["y"]) for r in out] == [3, 3, 3, 1]
    np.testing.assert_array_equal(np.concatenate([r["y"] for r in out]), np.arange(10) ** 2 + 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"chunk_0000{i}.npz" for i in range(4)]


def test_set_cover_dataset_on_ray_is_identical(tmp_path):
    local = build_dataset(SyntheticDatasetConfig(**SMALL), tmp_path / "local", "small", progress=False)
    remote = build_dataset(SyntheticDatasetConfig(**SMALL, compute=RAY), tmp_path / "ray", "small",
                           progress=False)
    assert remote.manifest["content_hash"] == local.manifest["content_hash"]
    assert remote.manifest["config_hash"] == local.manifest["config_hash"]  # the backend is not data
    # the local build is reused by a config that differs only in where it runs
    again = build_dataset(SyntheticDatasetConfig(**SMALL, compute=RAY), tmp_path / "local", "small",
                          progress=False)
    assert again.manifest["created"] == local.manifest["created"]


def test_mace_labels_on_ray_are_identical(tmp_path, compas):
    world, X = compas
    solver = MACE(backend="milp", norm="one")
    local = label_tabular(world, X, solver, tmp_path / "local", chunk_size=6, n_jobs=1, progress=False)
    remote = label_tabular(world, X, solver, tmp_path / "ray", chunk_size=6, progress=False, compute=RAY)
    for field in ("cf", "distance", "delta_min", "status"):
        np.testing.assert_array_equal(getattr(remote, field), getattr(local, field))


def test_sequence_labels_on_ray_are_identical(tmp_path):
    from data_gen.sequence_labels import label_sequences
    from data_gen.sequential_worlds import build_sequential, rejected_agents
    from solvers.sequential import BRKGASequencer

    built = build_sequential("german", cache_dir=tmp_path / "cache")
    X = rejected_agents(built, 4, seed=0)
    solver = BRKGASequencer(pop_size=40, n_offspring=30, n_mutants=10, n_generations=5, polish=0, seed=0)
    local = label_sequences(built.world, X, tmp_path / "local", solver, chunk_size=2, n_jobs=1, progress=False)
    remote = label_sequences(built.world, X, tmp_path / "ray", solver, chunk_size=2, progress=False, compute=RAY)
    for field in ("status", "cost", "actions", "values", "front_size", "front_agent", "front_cost"):
        np.testing.assert_array_equal(getattr(remote, field), getattr(local, field))


def test_killed_worker_is_retried_and_nothing_is_lost(tmp_path):
    chunks = [np.arange(s, e) for s, e in chunk_bounds(12, 4)]
    marker = tmp_path / "killed"
    out = run_chunks(die_once, str(marker), chunks, tmp_path / "work", compute=RAY, progress=False)
    assert marker.exists()  # a worker did die
    np.testing.assert_array_equal(np.concatenate([r["y"] for r in out]), np.arange(12) ** 2)


@pytest.mark.slow
def test_interrupted_driver_resumes_to_the_same_dataset(tmp_path, compas):
    """A driver stopped by Ctrl-C mid-run keeps its finished chunks; a rerun completes the same labels."""
    world, X = compas
    solver = MACE(backend="milp", norm="one")
    reference = label_tabular(world, X, solver, tmp_path / "ref", chunk_size=2, n_jobs=1, progress=False)
    work = tmp_path / "work"
    np.save(tmp_path / "X.npy", X)
    script = textwrap.dedent(f"""
        import numpy as np, signal, time
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises, even if a background parent ignored it
        from data_gen import classifiers, compute, mace_labels
        from solvers.mace import MACE
        world = classifiers.build("compas", "lr", cache_dir={str(tmp_path / "cache")!r}).world
        X = np.load({str(tmp_path / "X.npy")!r})
        slow = mace_labels._solve_chunk
        def paced(shared, chunk):  # slow enough that the driver is stopped mid-run
            time.sleep(0.5)
            return slow(shared, chunk)
        mace_labels._solve_chunk = paced
        mace_labels.label_tabular(world, X, MACE(backend="milp", norm="one"), {str(work)!r}, chunk_size=2,
                                  progress=False, compute=compute.ComputeConfig(backend="ray", n_workers=1))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300  # Ray's start and the paced chunks on 2 cores under a full suite took over 120 s
    while len(list(work.glob("chunk_*.npz"))) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]  # still running
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    finished = sorted(work.glob("chunk_*.npz"))
    assert proc.returncode != 0, err.decode()[-2000:]  # it was stopped, not finished
    assert 2 <= len(finished) < len(chunk_bounds(len(X), 2))
    assert not list(work.glob("*.tmp*"))  # no half-written chunk
    stamps = {p.name: p.stat().st_mtime_ns for p in finished}
    resumed = label_tabular(world, X, solver, work, chunk_size=2, progress=False, compute=RAY)
    assert all(p.stat().st_mtime_ns == stamps[p.name] for p in finished)  # finished chunks not redone
    for field in ("cf", "distance", "delta_min", "status"):
        np.testing.assert_array_equal(getattr(resumed, field), getattr(reference, field))
    assert len(load_chunk(finished[0])["status"]) == 2


def test_ray_leaves_print_alone_and_numba_compiles_after_it(tmp_path):
    """After a job on Ray whose worker died, and ``ray.shutdown`` (a fresh interpreter: this module's Ray is already
    up), the process's ``print`` is still the builtin and numba still compiles a parallel kernel. Ray replaced
    ``print`` for its progress bars when it printed the worker's death, and numba's ``get_num_threads``, which uses
    ``print``, then failed to compile: the set-cover labels failed in a test after a Ray batch had lost a worker."""
    script = textwrap.dedent("""
        import builtins
        import time
        import numba as nb
        import numpy as np
        from data_gen.compute import ComputeConfig, ray_init
        before = builtins.print
        ray = ray_init(ComputeConfig(backend="ray", n_workers=1))
        assert ray.get(ray.remote(lambda v: -v).remote(-2)) == 2

        def die():
            import os, signal
            os.kill(os.getpid(), signal.SIGKILL)

        try:  # a worker killed: the raylet's error message reaches this driver, which prints it through Ray's hook
            ray.get(ray.remote(max_retries=0)(die).remote())
        except Exception:
            pass
        time.sleep(2.0)
        ray.shutdown()

        @nb.njit(parallel=True)
        def total(x):
            s = 0.0
            for i in nb.prange(min(len(x), nb.get_num_threads())):
                s += x[i]
            return s

        print("SAME", builtins.print is before, "COMPILED", total(np.ones(4)) > 0)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[1])
    assert "SAME True COMPILED True" in out.stdout, out.stderr[-3000:]
