"""Experiment configuration: one YAML file per named experiment.

The schema is typed and strict: unknown keys, wrong types and impossible values are rejected
with an error that names the field. Generators and policies are listed by ``method`` with a
``params`` mapping that the method's own typed hyperparameter class validates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from data_gen.config import DataSection, StrictModel, parse_model, read_yaml


class MethodConfig(StrictModel):
    """A generator or policy to train: its method name and hyperparameters."""

    method: str = Field(description="registered method name, e.g. 'named_cfe' or 'maskable_ppo'")
    name: str | None = Field(None, description="run-directory name of this model (default: the method)")
    params: dict[str, Any] = Field(default_factory=dict, description="hyperparameters, checked by the method")
    group_mode: Literal["blind", "input", "per_group"] = Field(
        "blind", description="grouped worlds: blind (x only), input (x + one-hot group) or per_group (one model "
                             "per group, the paper's Table 4 protocol); see learners/grouped.py")

    @property
    def label(self) -> str:
        """The model's name in run directories and reports: ``name``, else the method (and its group mode)."""
        return self.name or (self.method if self.group_mode == "blind" else f"{self.method}_{self.group_mode}")


class EvaluationConfig(StrictModel):
    """How a run is evaluated on its held-out split."""

    filters: list[str] = Field(["all"], description="CFE-frequency filters to train and evaluate on: all, >10, >40")
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="share of agents held out for testing")
    solver_timing_agents: int = Field(200, ge=0, description="0: no solver timing; else the exact B&B is timed on "
                                      "every test agent, the CVXPY ILP and a policy's exact reference on this many")
    timing_repeats: int = Field(3, ge=1, description="timed passes of the exact solver and of each generator's "
                                                     "inference; the fastest counts (less noise on a shared machine)")
    verified_top_k: int = Field(20, ge=0, description="also score named-CFE models with verified top-k decoding (0: off)")


class AugmentationConfig(StrictModel):
    """Worse-off agent augmentation of the training split (paper Algorithm 1)."""

    ag1_per_agent: int = Field(0, ge=0, description="AG1: verified augments added per training agent (0: off)")
    ag2_min_count: int = Field(0, ge=0, description="AG2: raise rarer CFEs toward this many training agents (0: off)")
    draws: int = Field(4, ge=1, description="random candidate subsets drawn per augment wanted")
    rounds: int = Field(3, ge=1, description="AG2 rounds of drawing for CFEs still below the count")


class ExperimentConfig(DataSection):
    """A named experiment: the dataset (:class:`~data_gen.config.DataSection`: ``name``, ``dataset``,
    ``dataset_name``, ``data_dir``), the models to train and how to evaluate them."""

    output_dir: str = Field("runs", description="where run directories are written")
    generators: list[MethodConfig] = Field(default_factory=list, description="amortized generators to train")
    policies: list[MethodConfig] = Field(default_factory=list, description="RL policies to train")
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig, description="evaluation settings")
    augmentation: AugmentationConfig = Field(default_factory=AugmentationConfig, description="train-set augmentation")
    seeds: list[int] = Field([0], min_length=1, description="training seeds (one model per seed)")

    @model_validator(mode="after")
    def _check_group_modes(self) -> ExperimentConfig:
        for i, spec in enumerate(self.policies):
            if spec.group_mode != "blind":
                raise ValueError(f"policies.{i}.group_mode: policies act in the world and see the group there; "
                                 "only 'blind' applies")
        labels = [spec.label for spec in self.generators + self.policies]
        if len(set(labels)) < len(labels):
            raise ValueError(f"generators, policies: model names must differ (give each a 'name'), got {labels}")
        grouped = self.dataset.groups != "none" or self.dataset.classifier == "mix"
        for i, spec in enumerate(self.generators):
            if spec.group_mode != "blind" and not grouped:
                raise ValueError(f"generators.{i}.group_mode: {spec.group_mode!r} needs a dataset with groups "
                                 "(dataset.groups: manual | probabilistic, or classifier: mix)")
        return self


def parse_config(data: dict[str, Any], source: str = "config") -> ExperimentConfig:
    return parse_model(ExperimentConfig, data, source)


def load_config(path: str | Path) -> ExperimentConfig:
    return parse_config(read_yaml(path), str(path))
