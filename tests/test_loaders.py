"""The bundled data sets: checksums, overrides and the numeric loaders."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from data_gen.loaders import BUNDLED_DATA_DIR, checksums, data_path, load_numeric, load_raw

REPO = Path(__file__).resolve().parents[1]


def test_every_bundled_file_matches_its_checksum():
    sums = checksums()
    assert len(sums) == 18 and {rel.split("/")[0] for rel in sums} == {
        "adult", "german", "compas", "credit", "hill_valley", "arrhythmia", "lsvt"}
    for rel in sums:
        path = data_path(rel)
        assert path.parent.parent == BUNDLED_DATA_DIR and path.suffix == ".gz"


def test_readme_lists_every_file_with_its_checksum():
    text = (BUNDLED_DATA_DIR / "README.md").read_text()
    for rel, digest in checksums().items():
        assert f"`{rel}.gz`" in text and digest in text


def test_corrupted_copy_is_refused(tmp_path, monkeypatch):
    (tmp_path / "compas").mkdir()
    good = gzip.decompress((BUNDLED_DATA_DIR / "compas" / "compas_mace_processed_geco.csv.gz").read_bytes())
    (tmp_path / "compas" / "compas_mace_processed_geco.csv").write_bytes(good.replace(b"1", b"2", 1))
    monkeypatch.setenv("RECOURSE_DATA_DIR", str(tmp_path))
    with pytest.raises(ValueError, match=r"compas/compas_mace_processed_geco.csv.*SHA-256"):
        load_raw("compas")


def test_plain_override_reads_uncompressed_copy(tmp_path, monkeypatch):
    (tmp_path / "german").mkdir()
    src = BUNDLED_DATA_DIR / "german" / "german.data.gz"
    (tmp_path / "german" / "german.data").write_bytes(gzip.decompress(src.read_bytes()))
    monkeypatch.setenv("RECOURSE_DATA_DIR", str(tmp_path))
    df, y = load_raw("german")
    assert data_path("german/german.data").parent == tmp_path / "german"
    assert len(df) == 1_000 and y.sum() == 700
    with pytest.raises(FileNotFoundError, match="compas_mace_processed_geco.csv"):
        load_raw("compas")


def test_changed_file_is_checked_again(tmp_path, monkeypatch):
    shutil.copytree(BUNDLED_DATA_DIR / "german", tmp_path / "german")
    monkeypatch.setenv("RECOURSE_DATA_DIR", str(tmp_path))
    load_raw("german")
    path = tmp_path / "german" / "german.data.gz"
    path.write_bytes(gzip.compress(b"A11 6 A34 A43 1169\n"))
    with pytest.raises(ValueError, match="SHA-256"):
        load_raw("german")


@pytest.mark.parametrize(("name", "shape", "positives"), [
    ("hill_valley", (1_212, 100), 606), ("arrhythmia", (452, 279), 245), ("lsvt", (126, 312), 42),
    ("compas_numeric", (5_278, 13), 2_795)])
def test_numeric_loaders(name, shape, positives):
    X, y = load_numeric(name)
    assert X.shape == shape and int(y.sum()) == positives and set(np.unique(y)) == {0, 1}
    assert all(dtype.kind == "f" for dtype in X.dtypes)


def test_unknown_numeric_set():
    with pytest.raises(ValueError, match="unknown numeric data set 'iris'"):
        load_numeric("iris")


def test_no_code_reads_shared():
    """A user's clone has no ../shared: no library code, script or benchmark may look there."""
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    paths = [REPO / f for f in files.stdout.split()]  # the repository's own files, never a user's venv
    assert len(paths) > 50
    offenders = [str(p.relative_to(REPO)) for p in paths if "tests" not in p.parts
                 and ("../shared" in p.read_text("utf-8") or "shared/data" in p.read_text("utf-8"))]
    assert offenders == []
