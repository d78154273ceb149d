"""The warm-up every benchmark runs before its clock starts: the timed method once on a small input,
so that compiling kernels (numba, torch), first imports and first allocations are never counted as
the method's time. Each warm-up says so on stderr, with how long it took:

    warming up GeCo on one agent (compiling kernels, not timed) ... 2.31 s
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator


@contextlib.contextmanager
def warming_up(what: str = "") -> Iterator[None]:
    """Run the body untimed, announced on stderr as one line ending with its duration."""
    print(f"warming up {what + ' ' if what else ''}(compiling kernels, not timed) ...", end=" ", file=sys.stderr,
          flush=True)
    t = time.perf_counter()
    try:
        yield
    finally:
        print(f"{time.perf_counter() - t:.2f} s", file=sys.stderr, flush=True)
