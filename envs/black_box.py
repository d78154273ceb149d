"""A model seen only through ``predict_proba``: counted, optionally slow, optionally on a budget (issue 56).

``BlackBoxModel(model)`` hides every attribute of the model it wraps (no trees, splits, weights,
``score`` or ``exact``: a search that tries to read them gets an ``AttributeError`` naming the wrapper),
and answers only ``predict_proba`` (P(accept) per row) and ``predict`` (P > ``threshold``). Every call
and every row is counted (``calls``, ``rows``), so a table can report round trips and rows scored per
answer. ``latency_s`` adds a fixed wait per call: a remote scoring API (10–50 ms a call). ``Budget``
caps the calls and rows of one answer; a search asks ``budget.left`` before a call, and a call past
the cap raises ``BudgetExceeded`` (the cap is a promise the tables rely on, so it is enforced, not
trusted).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np


class BudgetExceeded(RuntimeError):
    """A call that would pass the query budget of the current answer."""


@dataclass
class Budget:
    """At most ``calls`` round trips and ``rows`` rows scored (per answer, or per batch of answers where a
    search answers several agents in one call: then ``rows`` is the per-agent cap times the agents)."""

    calls: int = 2  # round trips to the model
    rows: int = 256  # rows scored in all

    def __post_init__(self) -> None:
        if int(self.calls) < 1:
            raise ValueError(f"calls: must be >= 1, got {self.calls!r}")
        if int(self.rows) < 1:
            raise ValueError(f"rows: must be >= 1, got {self.rows!r}")


class BlackBoxModel:
    """``predict_proba`` / ``predict`` of a model and nothing else; calls, rows and a budget counted."""

    def __init__(self, model: Any, latency_s: float = 0.0, threshold: float = 0.5) -> None:
        self._model = model
        self.latency_s = float(latency_s)  # seconds added to every call (a remote API's round trip)
        self.threshold = float(threshold)  # accepted iff P(accept) > threshold
        self.n_features = int(getattr(model, "n_features", 0)) or None  # TabularWorld checks the width
        self.calls = 0
        self.rows = 0
        self._limit: tuple[int, int] | None = None  # (calls, rows) at which the current budget ends

    # ----------------------------------------------------------------------------- the only queries
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """(n,) P(accept) per row: one round trip."""
        X = np.atleast_2d(np.asarray(X, float))
        if self._limit is not None and (self.calls + 1 > self._limit[0] or self.rows + len(X) > self._limit[1]):
            raise BudgetExceeded(f"a call of {len(X)} rows passes the budget ({self._limit[0]} calls, "
                                 f"{self._limit[1]} rows; spent {self.calls} calls, {self.rows} rows)")
        self.calls += 1
        self.rows += len(X)
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        p = np.asarray(self._model.predict_proba(X), float)
        return p[:, 1] if p.ndim == 2 and p.shape[1] == 2 else p.reshape(-1)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """(n,) bool acceptance: P(accept) > threshold (one round trip)."""
        return self.predict_proba(X) > self.threshold

    # ---------------------------------------------------------------------------------- the budget
    def budget(self, budget: Budget | None, agents: int = 1) -> _BudgetScope:
        """``with model.budget(Budget(2, 256), agents=n):`` every call inside counts against ``budget``
        (rows: per agent times ``agents``); None: no cap."""
        return _BudgetScope(self, budget, agents)

    def left(self) -> tuple[float, float]:
        """(calls, rows) left in the current budget (inf without one)."""
        if self._limit is None:
            return np.inf, np.inf
        return self._limit[0] - self.calls, self._limit[1] - self.rows

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"{name!r}: a BlackBoxModel answers only predict_proba and predict (the model's "
                             "parameters, splits and scores are hidden)")


class _BudgetScope:
    def __init__(self, model: BlackBoxModel, budget: Budget | None, agents: int) -> None:
        self.model, self.budget, self.agents = model, budget, int(agents)

    def __enter__(self) -> BlackBoxModel:
        m = self.model
        self.saved = m._limit
        if self.budget is not None:
            m._limit = (m.calls + int(self.budget.calls), m.rows + int(self.budget.rows) * self.agents)
        return m

    def __exit__(self, *exc: Any) -> None:
        self.model._limit = self.saved
