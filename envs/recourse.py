"""The result type shared by every solver, generator and policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Status = Literal["ok", "no_recourse", "unknown"]


@dataclass
class Recourse:
    """An ordered recourse for one agent.

    ``steps`` are ``(action_name, value)`` pairs in the order they are taken (``value`` is ``None``
    for actions without a tweak value, such as the capability world's). ``status`` is ``"ok"``
    when a recourse was produced, ``"no_recourse"`` when the method proved none exists and
    ``"unknown"`` when it gave up (time or node budget) without a proof either way.
    """

    steps: tuple[tuple[str, Any], ...]
    action_ids: tuple[int, ...]
    final_state: np.ndarray | None
    cost: float
    valid: bool
    method: str
    runtime: float = 0.0
    status: Status = "ok"
    confidence: float | None = None
    optimal: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def found(self) -> bool:
        """Whether the method returned a recourse at all."""
        return self.status == "ok"

    @property
    def action_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.steps)

    @classmethod
    def none(cls, method: str, *, status: Status = "no_recourse", runtime: float = 0.0,
             reason: str = "") -> Recourse:
        """The explicit answer for an agent with no (known) recourse."""
        return cls(steps=(), action_ids=(), final_state=None, cost=float("inf"), valid=False,
                   method=method, runtime=runtime, status=status, extra={"reason": reason} if reason else {})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (used by reports and the server)."""
        return {
            "status": self.status,
            "actions": [{"name": n, "value": v} for n, v in self.steps],
            "action_ids": list(self.action_ids),
            "cost": None if not np.isfinite(self.cost) else float(self.cost),
            "valid": bool(self.valid),
            "optimal": self.optimal,
            "method": self.method,
            "runtime_s": float(self.runtime),
            "confidence": self.confidence,
            "final_state": None if self.final_state is None else np.asarray(self.final_state).tolist(),
            **({"extra": self.extra} if self.extra else {}),
        }
