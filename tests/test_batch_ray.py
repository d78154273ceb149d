"""Batch recommendation over a large Parquet file in chunks, in process and on Ray: same answers as offline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import learners.registry  # noqa: F401  (registers hamming_knn, the model served here)
from data_gen.compute import ComputeConfig
from serving.batch import recommend_file, recommend_parquet
from serving.service import InputError, RecommendationService
from tests.serving_run import table_generator_registered, train_run

ray = pytest.importorskip("ray")  # the ray extra; CI installs it
pytestmark = pytest.mark.usefixtures("ray_cluster")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    with table_generator_registered():  # trains the test-only models too; these tests serve hamming_knn
        return train_run(tmp_path_factory.mktemp("svc"))


@pytest.fixture(scope="module")
def agents(tmp_path_factory):
    """120 agents in a Parquet file with row groups of 50 (the chunks' unit), with groups."""
    rng = np.random.default_rng(0)
    X = (rng.random((120, 8)) < 0.5).astype(np.int64)
    path = tmp_path_factory.mktemp("in") / "agents.parquet"
    frame = pd.DataFrame({**{f"f{j}": X[:, j] for j in range(8)}, "group": rng.integers(0, 2, 120)})
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=50)
    return path


@pytest.mark.parametrize("compute", [ComputeConfig(chunk_size=30),
                                     ComputeConfig(backend="ray", n_workers=2, chunk_size=30)],
                         ids=["local", "ray"])
@pytest.mark.slow
def test_chunked_batch_matches_offline(run, agents, tmp_path, compute):
    svc = RecommendationService(run, "hamming_knn", fallback_budget_s=None)
    reference = tmp_path / "ref.parquet"
    recommend_file(svc, agents, reference)
    out = tmp_path / "out.parquet"
    counts = recommend_parquet(svc, agents, out, tmp_path / "work", compute=compute, progress=False)
    got, want = pd.read_parquet(out), pd.read_parquet(reference)
    assert sum(counts.values()) == 120 and len(list((tmp_path / "work").glob("chunk_*.npz"))) == 5  # row groups of 50, 50, 20 in chunks of 30: 30+20, 30+20, 20
    assert list(got.columns) == list(want.columns)
    for col in ("agent", "group", "status", "method", "verified", "budget_exceeded"):
        assert got[col].tolist() == want[col].tolist(), col
    assert [list(v) for v in got["action_ids"]] == [list(v) for v in want["action_ids"]]
    assert [list(v) for v in got["actions"]] == [list(v) for v in want["actions"]]
    np.testing.assert_allclose(got["cost"], want["cost"])
    assert counts == want["status"].value_counts().to_dict() and set(counts) == {"ok", "no_recourse"}


def test_serve_script_ray_flag(run, agents, tmp_path):
    import serve

    out = tmp_path / "out.parquet"
    assert serve.main([str(run), "--model", "hamming_knn", "--batch-in", str(agents), "--batch-out", str(out),
                       "--ray", "local", "--ray-workers", "1", "--chunk-size", "60"]) == 0
    assert len(pd.read_parquet(out)) == 120 and (out.parent / "out.parquet.chunks").is_dir()


def test_chunked_batch_needs_parquet(run, tmp_path):
    svc = RecommendationService(run, "hamming_knn")
    with pytest.raises(InputError, match="Parquet"):
        recommend_parquet(svc, tmp_path / "a.csv", tmp_path / "o.parquet", tmp_path / "w")
    with pytest.raises(InputError, match="does not exist"):
        recommend_parquet(svc, tmp_path / "a.parquet", tmp_path / "o.parquet", tmp_path / "w")
