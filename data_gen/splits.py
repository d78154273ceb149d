"""CFE-frequency filters (``all``, ``>10``, ``>40``) and seeded train/test splits."""

from __future__ import annotations

import re

import numpy as np

_RULE = re.compile(r"^(all|>\d+)$")


def filter_mask(class_ids: np.ndarray, rule: str) -> np.ndarray:
    """Keep agents whose CFE is shared by more than N agents (rule ``>N``), or all of them."""
    if not _RULE.match(rule):
        raise ValueError(f"filter: expected 'all' or '>N' (e.g. '>10'), got {rule!r}")
    if rule == "all":
        return np.ones(len(class_ids), dtype=bool)
    counts = np.bincount(class_ids)
    return counts[class_ids] > int(rule[1:])


def train_test_split(class_ids: np.ndarray, test_fraction: float = 0.2, seed: int = 0,
                     stratify: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a seeded split; stratified by CFE so each class keeps its share in training."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction: must be in (0, 1), got {test_fraction}")
    rng = np.random.default_rng(seed)
    n = len(class_ids)
    if not stratify:
        perm = rng.permutation(n)
        k = int(round(test_fraction * n))
        return np.sort(perm[k:]), np.sort(perm[:k])
    # Stratified: shuffle, then within each class send the first floor(f * count) to test.
    perm = rng.permutation(n)
    cls = class_ids[perm]
    order = np.argsort(cls, kind="stable")
    sorted_cls = cls[order]
    starts = np.searchsorted(sorted_cls, sorted_cls, side="left")
    rank = np.arange(n) - starts
    counts = np.bincount(sorted_cls)[sorted_cls]
    is_test = rank < np.floor(test_fraction * counts)
    idx = perm[order]
    return np.sort(idx[~is_test]), np.sort(idx[is_test])
