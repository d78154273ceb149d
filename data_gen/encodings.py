"""Encodings of optimal CFEs for the learners (learning-CFE paper, section 3).

A CFE is a set of action ids, kept in canonical (ascending) order and padded with -1.
"""

from __future__ import annotations

import numpy as np


def named_action(sets: np.ndarray, n_actions: int) -> np.ndarray:
    """Multi-hot over the actions, (B, A) uint8."""
    sets = np.atleast_2d(sets)
    out = np.zeros((len(sets), n_actions + 1), dtype=np.uint8)
    np.put_along_axis(out, np.where(sets >= 0, sets, n_actions), 1, axis=1)
    return out[:, :n_actions]


def decode_named_action(multi_hot: np.ndarray, max_len: int | None = None) -> np.ndarray:
    """Multi-hot (B, A) back to padded ascending id rows (B, L)."""
    multi_hot = np.atleast_2d(multi_hot).astype(bool)
    width = max(1, int(multi_hot.sum(1).max(initial=0)) if max_len is None else max_len)
    ids = np.where(multi_hot, np.arange(multi_hot.shape[1]), np.iinfo(np.int64).max)
    ids = np.sort(ids, axis=1)[:, :width]
    return np.where(ids == np.iinfo(np.int64).max, -1, ids)


def full_action(sets: np.ndarray, actions: np.ndarray, max_len: int) -> np.ndarray:
    """The action vectors of each CFE followed by a stop token: (B, max_len + 1, n + 1) float32.

    Slot k holds the k-th action's capability vector (last column 0); the slot after the last
    action is the stop symbol (zeros, last column 1); remaining slots are zero padding.
    """
    sets = np.atleast_2d(sets)
    if sets.shape[1] > max_len and (sets[:, max_len:] >= 0).any():
        raise ValueError(f"sets: a CFE is longer than max_len={max_len}")
    sets = np.pad(sets, ((0, 0), (0, max(0, max_len - sets.shape[1]))), constant_values=-1)[:, :max_len]
    B, n = len(sets), actions.shape[1]
    out = np.zeros((B, max_len + 1, n + 1), dtype=np.float32)
    present = sets >= 0
    out[:, :max_len, :n] = np.where(present[..., None], actions[np.maximum(sets, 0)], 0)
    length = present.sum(1)
    out[np.arange(B), length, n] = 1.0
    return out


def decode_full_action(vectors: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Map predicted action vectors (B, L, n) to the nearest action ids (Hamming), padded with -1
    after the first slot whose stop column (the last one) wins."""
    vectors = np.asarray(vectors)
    n = actions.shape[1]
    body = vectors[..., :n] > 0.5
    stop = vectors[..., n] > 0.5 if vectors.shape[-1] > n else np.zeros(vectors.shape[:2], bool)
    dist = (body[:, :, None, :] != actions[None, None].astype(bool)).sum(-1)  # (B, L, A)
    ids = dist.argmin(-1)
    ended = np.cumsum(stop, axis=1) > 0
    return np.where(ended, -1, ids)


def set_keys(sets: np.ndarray, n_actions: int) -> np.ndarray:
    """One integer per padded ascending set row (equal sets, equal keys), vectorized."""
    sets = np.atleast_2d(sets).astype(np.int64)
    base = n_actions + 1
    if sets.shape[1] * np.log2(base) >= 62:
        raise ValueError(f"sets: {sets.shape[1]} slots over {n_actions} actions do not fit one integer key")
    return ((sets + 1) * base ** np.arange(sets.shape[1], dtype=np.int64)).sum(axis=1)


class CfeVocabulary:
    """Named CFEs: one class per distinct optimal set, with readable names ("a3+a17")."""

    def __init__(self, sets: np.ndarray, action_names: list[str]):
        sets = np.atleast_2d(sets)
        self.n_actions_, self.width_ = len(action_names), sets.shape[1]
        uniq = np.unique(sets, axis=0)
        order = np.lexsort(tuple(uniq[:, ::-1].T) + ((uniq >= 0).sum(1),))  # by length, then ids
        self.sets_ = uniq[order]
        self.keys_ = set_keys(self.sets_, self.n_actions_)
        self.sorter_ = np.argsort(self.keys_)
        self.names_ = ["+".join(action_names[a] for a in row if a >= 0) or "(none)" for row in self.sets_]

    def __len__(self) -> int:
        return len(self.sets_)

    def encode(self, sets: np.ndarray) -> np.ndarray:
        """Class id per row; -1 for a set never seen when the vocabulary was built."""
        sets = np.atleast_2d(sets)
        if sets.shape[1] < self.width_:
            sets = np.pad(sets, ((0, 0), (0, self.width_ - sets.shape[1])), constant_values=-1)
        elif sets.shape[1] > self.width_:
            if (sets[:, self.width_ :] >= 0).any():
                longer = (sets[:, self.width_ :] >= 0).any(1)
                sets = sets[:, : self.width_].copy()
                sets[longer] = -2  # cannot match any class
            else:
                sets = sets[:, : self.width_]
        keys = set_keys(sets, self.n_actions_)
        pos = np.searchsorted(self.keys_, keys, sorter=self.sorter_)
        pos = np.minimum(pos, len(self.keys_) - 1)
        hit = self.keys_[self.sorter_[pos]] == keys
        return np.where(hit, self.sorter_[pos], -1)

    def decode(self, class_ids: np.ndarray) -> np.ndarray:
        """Padded ascending id rows of the given classes."""
        return self.sets_[np.asarray(class_ids)]
