"""Typed, validated dataset configuration (unknown keys are rejected with the field named), and
the reading of experiment YAML files: strict parsing with errors that name the field, and the
dataset part of an experiment (:class:`DataSection`), which ``evaluation.config.ExperimentConfig``
extends and which ``data_gen`` reads on its own (``python -m data_gen.stats``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from data_gen.compute import ComputeConfig

ClassifierVariant = Literal["all_ones", "first5", "last5", "first10", "last10", "mid5", "mix"]
MIX_VARIANTS: tuple[str, ...] = ("first5", "last5", "first10", "last10", "mid5")


EXECUTION_FIELDS = ("chunk_size", "compute")  # how a dataset is built, not what it contains


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SyntheticDatasetConfig(StrictModel):
    """A synthetic agent-CFE dataset (learning-CFE paper, section 4.1)."""

    kind: Literal["synthetic"] = "synthetic"
    n_features: int = Field(20, ge=1, le=1024, description="number of binary capabilities n")
    n_actions: int = Field(100, ge=1, description="number of actions A (per group for probabilistic groups)")
    n_agents: int = Field(100_000, ge=1, description="agents drawn before filtering")
    pf: float = Field(0.68, ge=0.0, le=1.0, description="probability that an agent holds a capability")
    pa: float = Field(0.5, ge=0.0, le=1.0, description="probability that an action provides a capability")
    max_coordinate_cost: int | None = Field(None, ge=1, description="coordinate costs are integers in [1, this]; default n")
    classifier: ClassifierVariant = Field("all_ones", description="threshold variant; 'mix' hides one of five variants per agent")
    groups: Literal["none", "manual", "probabilistic"] = Field("none", description="grouped access to actions")
    n_groups: int = Field(5, ge=1, description="number of access groups")
    manual_fraction: float = Field(0.5, gt=0.0, le=1.0, description="manual groups: share of the pool each group may use")
    group_pa: list[float] = Field([0.4, 0.5, 0.6, 0.7, 0.8], description="probabilistic groups: pa of each group")
    n_discount_edges: int = Field(0, ge=0, description="random consequence edges k->h (0: order-blind costs)")
    discount_range: tuple[float, float] = Field((0.3, 0.8), description="discount factors are drawn uniformly here")
    max_cfe_len: int = Field(3, ge=1, description="agents whose optimal CFE is longer are dropped")
    require_unique: bool = Field(True, description="keep only agents with a unique optimal CFE")
    seed: int = Field(0, description="seed of the world, the agents and the splits")
    chunk_size: int = Field(20_000, ge=1, description="agents per labelling chunk (the unit of resumption)")
    compute: ComputeConfig = Field(ComputeConfig(), description="where labelling runs: local processes or Ray")

    @model_validator(mode="after")
    def _check(self) -> SyntheticDatasetConfig:
        if self.groups == "probabilistic":
            if len(self.group_pa) != self.n_groups:
                raise ValueError(f"group_pa: expected {self.n_groups} probabilities (n_groups), got {len(self.group_pa)}")
            if any(not 0.0 <= p <= 1.0 for p in self.group_pa):
                raise ValueError("group_pa: every probability must be in [0, 1]")
        if self.groups != "none" and self.classifier == "mix":
            raise ValueError("classifier: 'mix' cannot be combined with grouped access (one hidden group per agent)")
        lo, hi = self.discount_range
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"discount_range: need 0 <= low <= high <= 1, got {self.discount_range}")
        if self.classifier in ("first10", "last10") and self.n_features < 10 or self.n_features < 5 and self.classifier != "all_ones":
            raise ValueError(f"classifier: variant {self.classifier!r} needs more features than n_features={self.n_features}")
        if self.n_discount_edges > self.n_features * (self.n_features - 1):
            raise ValueError("n_discount_edges: more edges than feature pairs")
        return self

    def fingerprint(self) -> str:
        """Hash of the settings that determine the data (the chunk size and the compute backend do not)."""
        d = self.model_dump(exclude=set(EXECUTION_FIELDS))
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


DatasetConfig = SyntheticDatasetConfig


# ---------------------------------------------------------------------------- experiment files
class DataSection(StrictModel):
    """The dataset part of an experiment config: which dataset, and where it is stored."""

    name: str = Field(description="experiment name; the run directory is <output_dir>/<name>")
    dataset: DatasetConfig = Field(default_factory=DatasetConfig, description="the dataset to build or reuse")
    dataset_name: str | None = Field(None, description="dataset directory name (default: the experiment name)")
    data_dir: str = Field("data_cache", description="where datasets are stored")

    def model_post_init(self, __context: Any) -> None:
        if self.dataset_name is None:
            object.__setattr__(self, "dataset_name", self.name)


ModelT = TypeVar("ModelT", bound=BaseModel)


def _format_error(err: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid configuration"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def parse_model(model: type[ModelT], data: Any, source: str = "config") -> ModelT:
    """``model`` from a mapping, or a ValueError that names ``source`` and every bad field."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model(**data)
    except ValidationError as err:
        raise ValueError(_format_error(err, source)) from None


def read_yaml(path: str | Path) -> Any:
    """The content of a YAML file (an empty file is ``{}``), or an error naming the file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"config: {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({err})") from None
    return {} if data is None else data


def load_data_section(path: str | Path) -> DataSection:
    """The dataset part of an experiment YAML file; its other keys (models, evaluation) are not
    read here (``evaluation.config.load_config`` checks the whole file)."""
    data = read_yaml(path)
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k in DataSection.model_fields}
    return parse_model(DataSection, data, str(path))
