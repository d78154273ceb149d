"""The compile step (``learners/tabular/compile.py``) and the numba cache of the kernels."""

from __future__ import annotations

import importlib
import os
import sys

from learners.tabular.compile import GENERATORS, compile_kernels, is_inline, kernels

# kernels called only from inside other kernels: compiled into their callers (a caller loaded from the
# cache never compiles them on their own)
CALLED_FROM_KERNELS = {"_grow1", "_grow2", "_farthest", "trade_moves_kernel", "_first_layer_row"}


def test_compile_kernels_runs_every_kernel_and_reports(capsys):
    out = compile_kernels(progress=True)
    err = capsys.readouterr().err
    assert set(out) == {"seconds", "kernels", "signatures", "compiled", "loaded", "from_cache", "cache"}
    assert out["seconds"] > 0 and out["kernels"] == len(kernels()) > 40 and out["signatures"] > 0
    assert out["from_cache"] == (out["compiled"] == 0) and out["cache"]
    assert "compiling search kernels (first use only; cached in " in err and "1/11 forest: change_value" in err
    assert "10/11 deep forest: nearest_cfe" in err and "11/11 surrogate mlp: change_value" in err and "done in" in err
    assert set(GENERATORS) <= {line.rsplit(": ", 1)[-1].split(" ")[0] for line in err.splitlines()}
    # every kernel called from Python met the types of a run (a new kernel a run uses must be reached here)
    missing = sorted(k.py_func.__name__ for k in kernels()
                     if not is_inline(k) and not k.signatures and k.py_func.__name__ not in CALLED_FROM_KERNELS)
    assert missing == []
    again = compile_kernels(progress=False)  # all in memory now: nothing compiled, nothing loaded
    assert again["compiled"] == 0 and again["from_cache"]
    assert capsys.readouterr().err == ""


def test_a_newer_helpers_file_empties_a_dependent_kernels_cache(tmp_path, monkeypatch):
    """numba keys a cache by the kernel's own file: a kernel inlining ``kernel_helpers``' code from
    before its last edit must not load (``drop_stale_caches`` empties its index; a fresh one stays)."""
    from learners.tabular import kernel_helpers

    (tmp_path / "dependent_kernels.py").write_text(
        "import numba as nb\n\n\n@nb.njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "dependent_kernels", raising=False)
    module = importlib.import_module("dependent_kernels")
    assert module.twice(2.0) == 4.0  # compiled and saved
    cache_file = module.twice._cache._cache_file
    assert cache_file._load_index()
    kernel_helpers.drop_stale_caches(vars(module))  # saved after the helpers' last edit: kept
    assert cache_file._load_index()
    os.utime(cache_file._index_path, (0, 0))  # saved before it
    kernel_helpers.drop_stale_caches(vars(module))
    assert cache_file._load_index() == {}
