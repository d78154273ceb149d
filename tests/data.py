"""Skip marker for tests that read the real data sets in ../shared/data (or $RECOURSE_DATA_DIR)."""

from __future__ import annotations

import pytest

from data_gen import tabular


def _has_data() -> bool:
    try:
        tabular.data_dir_path()
    except FileNotFoundError:
        return False
    return True


requires_data = pytest.mark.skipif(not _has_data(), reason="no ../shared/data and no RECOURSE_DATA_DIR")
