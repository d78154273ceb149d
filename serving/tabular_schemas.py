"""The tabular API's request and response models, built from the served run's encoder.

:func:`record_models` makes one request field per raw feature of the data set, named as the data
set names it (``education-num``, ``marital-status``), typed by its domain so that the OpenAPI
schema states exactly what the service accepts: a categorical feature is an ``enum`` of its
categories (strings), an ordinal or binary feature an ``enum`` of its levels (or ``minimum`` /
``maximum`` where the levels are consecutive integers), a number has ``minimum`` / ``maximum``
(the observed range the model was trained on; ``integer`` where it must be whole). Each field's
description says whether it is immutable or increase/decrease-only. Every field is required and
an unknown one is an error.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from serving.records import Domain, RecordCodec
from serving.schemas import ErrorResponse, errors, integer  # noqa: F401  (ErrorResponse: the error body, shared)

Status = Literal["ok", "no_recourse", "already_positive", "unknown"]
OPTIONS = ("n_diverse",)  # request fields besides the features
TABULAR_ERRORS = errors("a category or level outside the feature's domain, a number outside the observed range or of "
                        "the wrong type, a fractional value for an integer feature, NaN or Infinity, n_diverse out of "
                        "range, no records or more than max_batch records")
"""The error statuses of the raw-record operations (tabular and sequential runs)."""


def _no_bool(v: Any) -> Any:
    """JSON true/false is not a level (Python would take True for 1)."""
    if isinstance(v, bool):
        raise ValueError("expected a level, got a boolean")
    return v


def _field_type(d: Domain) -> Any:
    if d.levels:
        if d.integer_levels:
            return integer(d.levels[0], d.levels[-1])
        if all(isinstance(v, str) for v in d.levels):
            return Literal[d.levels]  # type: ignore[valid-type]
        return Annotated[Literal[d.levels], BeforeValidator(_no_bool)]  # type: ignore[valid-type]
    if d.kind == "integer":
        return integer(int(d.lower), int(d.upper))
    return Annotated[float, Field(strict=True, ge=d.lower, le=d.upper, allow_inf_nan=False)]


def record_models(codec: RecordCodec, max_batch: int, max_diverse: int) -> tuple[type[BaseModel], type[BaseModel]]:
    """``(RecommendRequest, BatchRequest)`` for the raw features of ``codec``."""
    clash = [d.name for d in codec.domains if d.name in OPTIONS]
    if clash:
        raise ValueError(f"features {clash}: names clash with the request's options {OPTIONS}")
    fields: dict[str, Any] = {
        f"f{j}": (_field_type(d), Field(alias=d.name, description=d.describe()))
        for j, d in enumerate(codec.domains)}
    config = ConfigDict(extra="forbid", populate_by_name=False)
    Record = create_model("RawRecord", __config__=config, __doc__="One raw record: every feature of the data set.",
                          **fields)
    Request = create_model(
        "RecommendRequest", __config__=config,
        __doc__="One raw record (every feature of the data set) and the number of alternatives wanted.",
        n_diverse=(integer(0, max_diverse), Field(0, description=f"diverse alternatives wanted, 0 to {max_diverse}")),
        **fields)
    Batch = create_model(
        "BatchRequest", __config__=config, __doc__="A batch of raw records.",
        records=(list[Record], Field(min_length=1, max_length=max_batch,  # type: ignore[valid-type]
                                     description=f"1 to {max_batch} raw records (max_batch)")))
    return Request, Batch


def to_record(req: BaseModel) -> dict[str, Any]:
    """A validated request as a raw record (feature name -> value)."""
    return req.model_dump(by_alias=True, exclude=set(OPTIONS))


Value = str | int | float


class Change(BaseModel):
    """One feature the recommendation changes, in raw units."""

    model_config = ConfigDict(populate_by_name=True)

    feature: str
    from_: Value = Field(alias="from", description="the record's value")
    to: Value = Field(description="the recommended value")


class Alternative(BaseModel):
    """Another counterfactual, different from the answer (diverse: other features changed first)."""

    changes: list[Change]
    distance: float = Field(description="MACE's normalized distance (Eq. 3, l1 by default)")
    verified: bool
    method: str


class TabularRecommendation(BaseModel):
    """The answer for one raw record."""

    status: Status = Field(description="ok | no_recourse (MACE proved there is none) | already_positive "
                                       "(the model accepts the record) | unknown (not finished within the budget: "
                                       "ask again, the answer is being computed)")
    changes: list[Change] = Field(description="the changes to make, in raw units (empty unless status is ok)")
    distance: float | None = Field(description="MACE's normalized distance of the changes (null: no answer)")
    verified: bool = Field(description="the served model accepts the changed record and no constraint is broken "
                                       "(bounds, integer codes, one category per group, immutable and "
                                       "increase/decrease-only features, the world's rules)")
    method: str = Field(description="the generator's name, geco, mace, model (already accepted) or fallback")
    optimal: bool | None = Field(description="true: MACE certified the distance optimal; null: not certified")
    alternatives: list[Alternative] = Field(description="diverse alternatives (n_diverse)")
    budget_exceeded: bool = Field(description="the fallback did not finish within the budget (status unknown)")
    refused_by: list[str] | None = Field(None, description="status no_recourse or unknown: the world's rules that "
                                         "refused the counterfactuals found (their names, as /model lists them); "
                                         "null: no rule refused one, or an answer was found")
    rules: list[str] | None = Field(None, description="status ok: the world's rules (beyond the schema's "
                                    "mutability) that bear on the changes, each kept: one whose IF holds for them (a "
                                    "link whose feature moved, a forbidden transition from the record's level) or "
                                    "that reads a changed feature; null: the world has no rules, or no answer")
    latency_ms: float | None = Field(description="time spent on this request in the service")


class TabularBatchResponse(BaseModel):
    """The answers of a batch, in the order of the records."""

    results: list[TabularRecommendation]
    counts: dict[str, int] = Field(description="records per status")


class TabularHealth(BaseModel):
    status: Literal["ok"]
    model: str
    uptime_s: float


class TabularModelInfo(BaseModel):
    """The served run, its provenance and counters (no filesystem paths)."""

    model_config = ConfigDict(protected_namespaces=())

    kind: Literal["tabular"]
    run: str
    run_dir: str = Field(description="the run directory's name")
    dataset: str | None
    model_class: str | None = Field(description="tree | forest | lr | mlp")
    world: str | None
    generator: str = Field(description="the served generator")
    generators: list[str]
    fingerprint: dict[str, str] = Field(description="sha256 of the world's model.json and encoder.json")
    features: list[dict[str, str]]
    fallback: dict[str, Any] = Field(description="the chain after the generator and its budget per request")
    max_batch: int
    max_diverse: int
    metrics: dict[str, Any] | None = Field(description="the run's metrics.json")
    uptime_s: float
    counters: dict[str, int] = Field(description="requests, records; answers by method (generator, geco, mace) and "
                                                 "outcome (unknown, no_recourse, already_positive); verified; "
                                                 "generator_invalid / generator_none (sent to the fallback); "
                                                 "rule_refusals (generator answers the world's rules refused); "
                                                 "rejected (4xx)")
    rates: dict[str, float] = Field(description="per method and outcome: its share of the records that needed "
                                                "recourse; fallback = everything not answered by the generator")
    rules: list[str] | None = Field(None, description="the world's rules by name (the schema's mutability first); "
                                    "null: the schema's mutability only")
    rule_refusals: dict[str, int] = Field(default_factory=dict, description="generator answers refused per rule name "
                                          "(sent to the fallback)")
    remote_model: dict[str, Any] | None = Field(None, description="a model behind a round trip (serve.py "
                                                "--model-latency-ms): latency_ms per call, calls and rows so far; null: "
                                                "the run's own model, in process")
