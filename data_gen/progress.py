"""Progress reporting that suits where it goes: live bars on a terminal, sparse lines elsewhere.

A tqdm bar redraws itself with carriage returns many times a second. On a terminal that is one
live line; in CI, a pipe or a log file every redraw is kept, thousands of them. So every
progress bar of the project is made by :func:`progress_bar`, and the choice between a bar and
plain lines is made once, by :func:`interactive`. Lightning's per-epoch bars follow the same
rule (:func:`learners.lightning_fit.fit_lightning`). It lives in ``data_gen``, the lowest layer
that reports progress, so that both ``data_gen`` and ``learners`` use it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm.auto import tqdm
from tqdm.std import tqdm as std_tqdm

LINE_INTERVAL_S = 30.0  # off a terminal: at most one progress line this often (plus the first and last)


def interactive(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default ``sys.stderr``, where progress goes) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class LineProgress(std_tqdm):
    """A tqdm that prints whole lines instead of redrawing one: a line when it starts, at most one
    every :data:`LINE_INTERVAL_S` seconds, and a last one when it closes, with no bar glyphs and
    the overall (not smoothed) rate. Same API as tqdm (``update``, iteration, ``close``)."""

    _LINES = {"mininterval": LINE_INTERVAL_S, "maxinterval": LINE_INTERVAL_S, "smoothing": 0.0,
              "bar_format": "{desc}: {percentage:3.0f}% ({n_fmt}/{total_fmt}) [{elapsed}<{remaining}, {rate_fmt}]",
              "dynamic_ncols": False}

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **{**kwargs, **self._LINES})

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg is None:  # a refresh: one whole line (msg="" is tqdm clearing the bar: nothing to clear)
            self.fp.write(self.__str__() + "\n")
            self.fp.flush()
        return False  # nothing on screen to clear or overwrite later

    def close(self) -> None:
        if not self.disable and self.n != self.last_print_n:
            self.display()  # the last line: where it ended
        self.leave = False  # tqdm's own close would end the bar's line with one more newline
        super().close()


def progress_bar(iterable: Iterable[Any] | None = None, *, enabled: bool = True, **kwargs: Any) -> std_tqdm:
    """A progress bar over ``iterable`` (or updated by hand with ``total=``), with tqdm's
    arguments: a live tqdm bar when its stream (``file``, default stderr) is a terminal, a
    :class:`LineProgress` otherwise, and a disabled (silent) tqdm when not ``enabled``."""
    if not enabled:
        return tqdm(iterable, disable=True, **kwargs)
    if interactive(kwargs.get("file")):
        return tqdm(iterable, **kwargs)
    return LineProgress(iterable, **kwargs)
