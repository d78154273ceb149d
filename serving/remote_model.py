"""The served model when each call is a round trip: a remote scoring API (issue 56, item 4).

A :class:`~serving.tabular.TabularService` built with ``model_latency_s > 0`` (``serve.py
--model-latency-ms``) answers through :class:`RemoteModel` instead of the run's model:

- the model is seen through ``predict_proba`` only (``envs.black_box.BlackBoxModel``: no trees, no
  weights; every call and row counted), and each call waits ``latency_s`` first: the round trip of a
  remote API, simulated for a benchmark, or 0 where the model's own calls are already remote;
- within one request (``with model.request(X):``) the model's answers are remembered per exact row (the
  row's bytes): the service's checks of an answer the search already scored cost no call (it is the
  same model's answer to the same row, not the search's word), and the request's own records ride
  along the first call that is made (their acceptance is then known without a round trip of its own).

A request that would cost 4 round trips (the record's own acceptance, the search's 2, the check of its
answer) costs 2. Outside a request, every call goes to the model.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from envs.black_box import BlackBoxModel
from learners.tabular.rows import row_keys


class _Memo:
    """The model's answers of one request: sorted row keys and their P(accept)."""

    def __init__(self, pending: np.ndarray | None) -> None:
        self.keys: np.ndarray | None = None  # sorted row keys (their width is the first call's)
        self.proba = np.zeros(0)
        self.pending = pending  # rows sent along the next call (the request's own records)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(known, P) per key: whether the model answered that row already in this request, and its answer."""
        p = np.full(len(keys), np.nan)
        if self.keys is None or not len(self.keys) or not len(keys) or self.keys.dtype != keys.dtype:
            return np.zeros(len(keys), bool), p
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        known = self.keys[at] == keys
        p[known] = self.proba[at[known]]
        return known, p

    def add(self, keys: np.ndarray, proba: np.ndarray) -> None:
        if self.keys is not None and self.keys.dtype != keys.dtype:
            return  # another width (cannot happen within one world): nothing remembered
        keys = keys if self.keys is None else np.concatenate([self.keys, keys])
        proba = np.concatenate([self.proba, proba])
        order = np.argsort(keys, kind="stable")
        self.keys, self.proba = keys[order], proba[order]


class RemoteModel:
    """``predict_proba`` / ``predict`` of a model behind a round trip of ``latency_s``, remembered per request."""

    def __init__(self, model: Any, latency_s: float = 0.0, threshold: float = 0.5) -> None:
        self.remote = BlackBoxModel(model, latency_s=latency_s, threshold=threshold)
        self.latency_s = float(latency_s)  # seconds each call waits (the round trip)
        self.threshold = float(threshold)  # accepted iff P(accept) > threshold
        self.n_features = self.remote.n_features
        self._local = threading.local()  # the current request's memo, per thread (requests run on several)

    @property
    def calls(self) -> int:
        """Round trips made so far (all requests)."""
        return self.remote.calls

    @property
    def rows(self) -> int:
        """Rows scored so far (all requests)."""
        return self.remote.rows

    @contextmanager
    def request(self, records: np.ndarray | None = None) -> Iterator[RemoteModel]:
        """Remember the model's answers until the end of the block; ``records`` (encoded rows) ride along
        the block's first call. A block inside another uses the outer one's memory."""
        if getattr(self._local, "memo", None) is not None:
            yield self
            return
        self._local.memo = _Memo(None if records is None else np.array(records, float, ndmin=2))
        try:
            yield self
        finally:
            self._local.memo = None

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """(n,) P(accept) per row: one round trip for the rows not answered yet in this request, none if all were."""
        X = np.ascontiguousarray(np.atleast_2d(np.asarray(X, float)))
        memo = getattr(self._local, "memo", None)
        if memo is None:
            return self.remote.predict_proba(X)
        keys = row_keys(X)
        known, p = memo.lookup(keys)
        ask = X[~known]
        if memo.pending is not None:  # the request's records, asked once, with the first call
            ask, memo.pending = np.vstack([memo.pending, ask]), None
        if len(ask):
            ask_keys, first = np.unique(row_keys(ask), return_index=True)  # a row repeated is sent once
            memo.add(ask_keys, self.remote.predict_proba(ask[first]))
            known, p = memo.lookup(keys)
        return p

    def predict(self, X: np.ndarray) -> np.ndarray:
        """(n,) bool acceptance: P(accept) > threshold."""
        return self.predict_proba(X) > self.threshold

    def __getstate__(self) -> dict[str, Any]:  # a fallback process gets the model, not this thread's memo
        return {k: v for k, v in self.__dict__.items() if k != "_local"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
