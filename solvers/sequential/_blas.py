"""BLAS thread limits for the sequential solvers.

Their batches are small (hundreds to thousands of rows through a 2-layer MLP); multi-threaded
BLAS on a busy machine is ~20x slower there than one thread, and the labellers run one agent per
core anyway. The controller (a scan of the loaded libraries) is built once per process.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from functools import cache

from threadpoolctl import ThreadpoolController


@cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()


def blas_limit(threads: int | None) -> AbstractContextManager:
    """A context limiting BLAS to ``threads`` threads (None: leave as is)."""
    return nullcontext() if threads is None else _controller().limit(limits=threads, user_api="blas")
