"""The uniform generator interface and the method registry.

A generator maps agents to recommended CFEs. Like scikit-learn estimators, ``__init__`` only
stores typed hyperparameters (a dataclass per method, each field documented), ``fit`` returns
``self`` and learned state ends in ``_``. Models persist as ``weights.pt`` (a torch state_dict,
loaded with ``weights_only=True``) or ``arrays.npz`` (``allow_pickle=False``) plus ``config.json``
-- never an arbitrary pickle.
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from data_gen.dataset import Split
from envs.capability import CapabilityWorld


@dataclass
class Prediction:
    """Generated CFEs: ascending action ids padded with -1, and the model's confidence in each."""

    sets: np.ndarray  # (B, L) int64
    confidence: np.ndarray  # (B,) probability the model gives its own answer


@dataclass
class FitContext:
    """What a generator may know about the problem besides the agent-CFE pairs."""

    n_features: int
    n_actions: int
    max_len: int  # longest CFE in the data
    action_vectors: np.ndarray | None = None  # (A, n): known to full-action generators only
    action_names: list[str] | None = None
    seed: int = 0
    run_dir: Path | None = None  # where to put checkpoints and CSV logs
    progress: bool = True
    world: CapabilityWorld | None = None  # the full world: for RL policies, which act in it

    @classmethod
    def from_world(cls, world: CapabilityWorld, max_len: int, **kw: Any) -> FitContext:
        return cls(world.n_features, world.n_actions, max_len, world.actions.astype(np.uint8),
                   list(world.action_names), world=world, **kw)


def require_at_least(params: Any, minimum: int, *names: str) -> None:
    """Raise a ValueError naming the first field of ``params`` among ``names`` that is below ``minimum``."""
    for name in names:
        if getattr(params, name) < minimum:
            raise ValueError(f"{name}: must be >= {minimum}, got {getattr(params, name)}")


def build_params(method: str, Params: type, params: dict[str, Any]) -> Any:
    """``Params(**params)``, or a ValueError naming the method and the unknown hyperparameters."""
    known = {f.name for f in dataclasses.fields(Params)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"{method}: unknown hyperparameter(s) {unknown}; known: {sorted(known)}")
    return Params(**params)


class Generator(ABC):
    """Base class of every amortized CFE generator."""

    method: ClassVar[str]
    Params: ClassVar[type]  # the method's hyperparameter dataclass

    def __init__(self, **params: Any):
        self.params = build_params(self.method, self.Params, params)

    @abstractmethod
    def fit(self, train: Split, val: Split | None, ctx: FitContext) -> Generator:
        """Learn from agent-CFE pairs; returns self."""

    @abstractmethod
    def predict(self, X: np.ndarray) -> Prediction:
        """Recommended CFE and confidence for each agent (a batch)."""

    @abstractmethod
    def _save_state(self, path: Path) -> dict[str, Any]:
        """Write learned state under ``path``; return JSON-able extra metadata."""

    @abstractmethod
    def _load_state(self, path: Path, meta: dict[str, Any]) -> None:
        """Restore what ``_save_state`` wrote."""

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = self._save_state(path)
        (path / "config.json").write_text(json.dumps(
            {"method": self.method, "params": dataclasses.asdict(self.params), "meta": meta}, indent=2))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Generator:
        path = Path(path)
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"model: {path} has no config.json (not a saved generator)")
        cfg = json.loads((path / "config.json").read_text())
        klass = GENERATORS.get(cfg["method"]) if cls is Generator else cls
        if klass is None or klass.method != cfg["method"]:
            raise ValueError(f"{path}: saved method {cfg['method']!r} is not {getattr(cls, 'method', 'a known method')!r}")
        model = klass(**cfg["params"])
        model._load_state(path, cfg["meta"])
        return model


GENERATORS: dict[str, type[Generator]] = {}


def register(cls: type[Generator]) -> type[Generator]:
    """Class decorator: make a generator available to configs by its ``method`` name."""
    GENERATORS[cls.method] = cls
    return cls


def build_generator(method: str, params: dict[str, Any]) -> Generator:
    """A new generator of the registered ``method`` (every method module is imported with the
    ``learners`` package: see ``learners/__init__.py``)."""
    if method not in GENERATORS:
        raise ValueError(f"method: unknown generator {method!r}; known: {sorted(GENERATORS)}")
    return GENERATORS[method](**params)
