"""The labels' value vocabulary as padded tables, looked up for every numeric column at once (issue 56).

``budget_search`` reads the vocabulary (``steps.vocab_sides``: the values a move up takes and those a move
down takes) on every round: the snaps of round one's proposals and the first values past an agent (its
screens, its shrinks). Done a column at a time, those lookups were a dozen small array operations per
numeric column, about 1.3 ms of the 20 ms an answer computes against a remote model. Here each side of
every column sits in one row of a table padded with +inf, built once per vocabulary, and a lookup is one
comparison of the rows against it: the count of values below a point is ``np.searchsorted``'s index, so
the values found are those of the column-at-a-time code, bit for bit (``tests/test_vocab_table.py``). The
values between an agent and its answer (``between_values``: the answer's split edges just inside it) are looked up
the same way, in place of ``steps.vocab_between`` a column at a time (1.3 ms of the compute between a request's
calls on Adult forest).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from learners.tabular.geometry import WorldGeometry

SAME_EDGE = 1e-9  # vocabulary values nearer than this share of their size are copies of one split edge


def vocab_sides(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A column's sorted vocabulary ``v`` as the values a move *up* takes and those a move *down* takes: of
    each run of copies of one edge (values within ``SAME_EDGE``, the float noise of the labels' unscaling:
    Credit forest's 265.00001525878906 and 265.0000152587891), the largest going up and the smallest going
    down. The copies straddle the split in the model's float32 reading (Credit forest's 265.00001525878906
    reads as 265.0, on its split ``x <= 265``, and 265.0000152587891 as 265.00003, past it), so only that copy
    crosses it either way, and the others would each take a row of every vocabulary move (Credit forest: 166
    values, 125 edges). Where the labels hold one copy, it is taken both ways (``float32_sides`` makes the other,
    for ``moves.edge_twins`` only: made for every move, it cost more answers than it gained)."""
    v = np.asarray(v, float)
    if len(v) < 2:
        return v, v
    new = np.diff(v) > SAME_EDGE * np.maximum(1.0, np.abs(v[1:]))
    if new.all():
        return v, v
    first = np.concatenate([[True], new])
    last = np.concatenate([new, [True]])
    return v[last], v[first]


def float32_sides(up: np.ndarray, down: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``up`` with each value that float32 reads lower (rounded down) raised to the float32 above it, ``down``
    with each that float32 reads higher lowered to the float32 below it: a tree that reads float32 splits
    between float32 values, so a value past a split in float64 but read on its near side crosses it only as the
    next float32 (Credit forest's 495.0000152587891, the only copy its seed-0 labels hold of the split ``x <=
    495.0``, reads as 495.00003: a move down to it stays above the split, to 495.0 crosses it). Less than one
    float32 step; a value float32 holds exactly (an integer code, most vocabularies) is kept bit for bit."""
    def moved(a: np.ndarray, way: float) -> np.ndarray:
        f = a.astype(np.float32)
        wrong = (f.astype(float) < a) if way > 0 else (f.astype(float) > a)
        if not wrong.any():
            return a
        return np.where(wrong, np.nextafter(f, np.float32(way * np.inf)).astype(float), a)

    return moved(up, 1.0), moved(down, -1.0)


LOOKUP_ELEMENTS = 1 << 22  # the most comparisons one block of a lookup holds at once (memory: rows x columns x values)
_CACHE_SIZE = 16  # vocabularies whose tables are kept (a process serves a few generators)


@dataclass(frozen=True)
class VocabTable:
    """Each numeric column with a vocabulary (``cols``, C) as two ascending rows padded with +inf: the values a
    move up takes (``up``, C x L; ``n_up`` real ones) and those a move down takes (``down``, ``n_down``)."""

    cols: np.ndarray
    up: np.ndarray
    n_up: np.ndarray
    down: np.ndarray
    n_down: np.ndarray


_TABLES: dict[tuple, tuple[list[np.ndarray], VocabTable]] = {}
_TABLES_LOCK = threading.Lock()


def vocab_table(geo: WorldGeometry, vocab: list[np.ndarray]) -> VocabTable:
    """The ``VocabTable`` of ``vocab`` on ``geo``'s numeric columns, built once and kept (by the vocabulary
    arrays' identity: the cache holds them, so an id is not reused while its entry lives)."""
    key = (geo.numeric.tobytes(), *map(id, vocab))
    with _TABLES_LOCK:  # the search's helper thread looks up too (its guessed moves)
        hit = _TABLES.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], vocab, strict=True)):
        return hit[1]
    cols = np.array([c for c in np.flatnonzero(geo.numeric) if len(vocab[c])], np.int64)
    sides = [vocab_sides(vocab[c]) for c in cols]
    width = max([1] + [max(len(u), len(d)) for u, d in sides])

    def padded(k: int) -> tuple[np.ndarray, np.ndarray]:
        T = np.full((len(cols), width), np.inf)
        for i, s in enumerate(sides):
            T[i, : len(s[k])] = s[k]
        return T, np.array([len(s[k]) for s in sides], np.int64)

    table = VocabTable(cols, *padded(0), *padded(1))
    with _TABLES_LOCK:
        while len(_TABLES) >= _CACHE_SIZE:  # the oldest first
            _TABLES.pop(next(iter(_TABLES)))
        _TABLES[key] = (list(vocab), table)
    return table


def _counts(T: np.ndarray, p: np.ndarray, strict: bool) -> np.ndarray:
    """(R, C) per row of ``p`` (R, C) and column, the values of ``T`` (C, L) below (``strict``: < p) or at most
    ``p``: ``np.searchsorted(row, p, "left" / "right")`` on each column's real values for a finite p (the +inf
    padding is never counted); a NaN p counts none, where ``np.searchsorted`` places it past every value (the
    callers read it so)."""
    out = np.empty(p.shape, np.int64)
    step = max(1, LOOKUP_ELEMENTS // max(1, T.size))
    for lo in range(0, len(p), step):
        q = p[lo:lo + step, :, None]
        out[lo:lo + step] = (T[None] < q).sum(-1) if strict else (T[None] <= q).sum(-1)
    return out


def snap_outward(table: VocabTable, X: np.ndarray, P: np.ndarray) -> np.ndarray:
    """``P`` (N, K, D) with each numeric change moved to the nearest vocabulary value at least as far from the
    agent ``X`` (N, D) in its direction (unchanged where the vocabulary has none): ``first_round._snap``."""
    S = P.copy()
    c = table.cols
    if not len(c) or not P.size:
        return S
    N, K, _ = P.shape
    p = P[:, :, c].reshape(N * K, len(c))
    x = np.repeat(X[:, c], K, axis=0)
    up, down = p > x + 1e-12, p < x - 1e-12
    ci = np.arange(len(c))[None, :]
    i_up = np.minimum(_counts(table.up, np.where(np.isnan(p), np.inf, p), True), table.n_up - 1)  # first >= p
    i_dn = np.clip(_counts(table.down, p, False) - 1, 0, table.n_down - 1)  # last value <= p
    v_up, v_dn = table.up[ci, i_up], table.down[ci, i_dn]
    snapped = np.where(up & (v_up >= p), v_up, np.where(down & (v_dn <= p), v_dn, p))
    S[:, :, c] = snapped.reshape(N, K, len(c))
    return S


def first_values(table: VocabTable, X: np.ndarray, V: int) -> np.ndarray:
    """(2, N, D, V) per agent and numeric column the first ``V`` vocabulary values above the agent's value
    (ascending) and below it (descending); NaN past the vocabulary's end and for other columns:
    ``steps.first_vocab_values``."""
    N, D = X.shape
    out = np.full((2, N, D, V), np.nan)
    c = table.cols
    if not len(c) or not N:
        return out
    b = X[:, c]
    nan = np.isnan(b)
    ci = np.arange(len(c))[None, :, None]
    k = np.arange(V)[None, None, :]
    i_up = np.where(nan, table.n_up, _counts(table.up, b, False))[..., None] + k  # past the values <= b
    i_dn = np.where(nan, table.n_down, _counts(table.down, b, True))[..., None] - 1 - k  # below the values < b
    L = table.up.shape[1]
    out[0][:, c] = np.where(i_up < table.n_up[None, :, None], table.up[ci, np.minimum(i_up, L - 1)], np.nan)
    out[1][:, c] = np.where(i_dn >= 0, table.down[ci, np.maximum(i_dn, 0)], np.nan)
    return out


def between_values(table: VocabTable, X: np.ndarray, B: np.ndarray, K: int) -> np.ndarray:
    """(N, D, K) per agent and numeric column the ``K`` vocabulary values strictly between the agent's value ``X``
    (N, D) and ``B`` (N, D; finite), nearest ``B`` first, each edge's copy on the side of the change; NaN past them
    and for other columns: ``steps.vocab_between`` for every column at once."""
    N, D = X.shape
    out = np.full((N, D, K), np.nan)
    c = table.cols
    if not len(c) or not N:
        return out
    x, b = X[:, c][..., None], B[:, c]
    up = b[..., None] > x
    ci = np.arange(len(c))[None, :, None]
    k = np.arange(K)[None, None, :]
    i_up = _counts(table.up, b, True)[..., None] - 1 - k  # the values below b, descending
    i_dn = _counts(table.down, b, False)[..., None] + k  # the values above b, ascending
    v_up = table.up[ci, np.clip(i_up, 0, table.n_up[None, :, None] - 1)]
    v_dn = table.down[ci, np.clip(i_dn, 0, table.n_down[None, :, None] - 1)]
    vals = np.where(up, v_up, v_dn)
    inside = np.where(up, (i_up >= 0) & (vals > x), (i_dn < table.n_down[None, :, None]) & (vals < x))
    out[:, c] = np.where(inside, vals, np.nan)
    return out
