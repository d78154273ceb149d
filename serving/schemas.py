"""The HTTP API's request and response models: the contract the OpenAPI schema states.

The request models are built per served world by :func:`request_models`, so that the schema says
exactly what the service accepts: ``x`` has ``n_features`` items, each the integer 0 or 1;
``group`` is an integer in ``[0, n_groups)``, required when the world has more than one group;
a batch holds 1 to ``max_batch`` agents, each with its own group. Every request the schema
accepts is answered 200 and every request it rejects gets a 4xx; :data:`ERRORS` lists the error
statuses in the shape of :class:`ErrorResponse`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from serving.fallback import Status


def _integral(v: Any) -> Any:
    """JSON has one number type, and JSON Schema counts 1.0 as the integer 1: accept it as 1
    (0.5, true and "1" stay errors)."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def integer(lo: int, hi: int) -> Any:
    """An integer in ``[lo, hi]`` (1.0 included), stated as ``minimum``/``maximum`` in the JSON
    schema: the bounds come before the validator, or pydantic renders them as unknown keywords."""
    return Annotated[int, Field(strict=True, ge=lo, le=hi), BeforeValidator(_integral)]


Bit = integer(0, 1)


class _Strict(BaseModel):
    """A request model: an unknown field is an error (a typo must not be ignored silently)."""

    model_config = ConfigDict(extra="forbid")


def request_models(n_features: int, n_groups: int, max_batch: int) -> tuple[type[BaseModel], type[BaseModel]]:
    """``(AgentRequest, BatchRequest)`` for a world of ``n_features`` capabilities and ``n_groups``
    groups, and batches of at most ``max_batch`` agents."""
    X = Annotated[list[Bit], Field(min_length=n_features, max_length=n_features,
                                   description=f"the agent's capabilities: exactly {n_features} integers, each 0 or 1")]
    if n_groups > 1:
        class AgentRequest(_Strict):
            """One agent and its group."""

            x: X
            group: integer(0, n_groups - 1) = Field(  # type: ignore[valid-type]
                description=f"the agent's group, 0 to {n_groups - 1} (this world has {n_groups})")
    else:
        class AgentRequest(_Strict):
            """One agent (this world has a single group, so ``group`` may be left out)."""

            x: X
            group: integer(0, 0) | None = Field(  # type: ignore[valid-type]
                None, description="the agent's group: this world has one, so 0 or left out")

    class BatchRequest(_Strict):
        """A batch of agents, each with its own group."""

        agents: list[AgentRequest] = Field(min_length=1, max_length=max_batch,
                                           description=f"1 to {max_batch} agents (max_batch)")

    return AgentRequest, BatchRequest


class ActionOut(BaseModel):
    """One recommended action, as the world names it."""

    id: int = Field(description="action id in the world")
    name: str
    effects: list[str] = Field(description="the capabilities the action adds")


class Recommendation(BaseModel):
    """The answer for one agent."""

    status: Status = Field(description="ok | no_recourse (provably none) | already_positive | unknown (budget)")
    actions: list[ActionOut] = Field(description="recommended actions in the order to take them")
    cost: float | None = Field(description="cost of the actions, priced by the world (null: no recommendation)")
    confidence: float | None = Field(description="the generator's probability of its answer (null: not from the generator)")
    verified: bool = Field(description="checked against the world: accepted at the end, every action allowed")
    method: str = Field(description="generator:<method>, fallback:setcover-bnb or world")
    optimal: bool | None = Field(description="true: certified optimum (exact fallback); null: not certified")
    budget_exceeded: bool = Field(description="the fallback solver did not finish within the budget (status unknown)")


class BatchResponse(BaseModel):
    """The answers of a batch, in the order of the agents."""

    results: list[Recommendation]
    counts: dict[str, int] = Field(description="agents per status")


class Health(BaseModel):
    """Liveness: the process answers and has a model loaded."""

    status: Literal["ok"]
    model: str
    uptime_s: float


class DatasetInfo(BaseModel):
    """The run's dataset, named without any filesystem path."""

    name: str | None
    dir: str = Field(description="the dataset's directory name (under the data directory of the run's config)")
    content_hash: str | None
    config: dict[str, Any] | None = Field(description="the generating config")


class WorldInfo(BaseModel):
    """The sizes of the served world."""

    n_features: int
    n_actions: int
    n_groups: int
    order_matters: bool
    feature_names: list[str]


class FallbackInfo(BaseModel):
    """The exact fallback and its per-request budget."""

    solver: str
    budget_ms: float | None = Field(description="null: no limit")


class ModelInfo(BaseModel):
    """The served model, its provenance and counters."""

    model_config = ConfigDict(protected_namespaces=())

    run: str = Field(description="the run's name (its config's name)")
    run_dir: str = Field(description="the run directory's name (no filesystem path)")
    dataset: DatasetInfo
    model: str
    method: str
    filter: str
    seed: int
    metrics: dict[str, Any] | None = Field(description="held-out metrics of this model from metrics.json, if evaluated")
    world_fingerprint: str
    model_fingerprint: str = Field(description="sha256 over config.json and the weight files")
    model_files: list[str] = Field(description="the hashed files, by name")
    world: WorldInfo
    fallback: FallbackInfo
    max_batch: int
    uptime_s: float
    counters: dict[str, int | float] = Field(description="requests, agents, generated, verified, fallbacks, "
                                                   "budget_exceeded, already_positive, no_recourse, rejected (4xx responses), "
                                                   "fallback_rate = fallbacks / generated")


class FieldError(BaseModel):
    """One invalid field of a request."""

    field: str = Field(description="where, e.g. agents[3].x[7]")
    message: str


class ErrorResponse(BaseModel):
    """Every error the service returns: ``detail`` names the field and the problem."""

    detail: str = Field(description="the first problem, starting with the field it concerns")
    errors: list[FieldError] | None = Field(None, description="every invalid field (422 only)")


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


TOO_LARGE = _error("request body too large for any valid request (checked before parsing)")
INTERNAL = _error("unexpected server error (logged on the server)")


def errors(invalid: str) -> dict[int | str, dict[str, Any]]:
    """The error statuses of an operation with a JSON body; ``invalid`` lists, in the served world's
    words, what makes a body not match the schema (the 422)."""
    return {
        400: _error("malformed JSON body (detail gives the position), or a body that is not UTF-8"),
        413: TOO_LARGE,
        422: _error(f"the body does not match the schema ({invalid}, a missing or unknown field, a body that is "
                    "not a JSON object); detail names the field"),
        500: INTERNAL,
    }


ERRORS = errors("wrong length, a value other than 0/1, a group out of range, more than max_batch agents")
"""The error statuses of an operation with a JSON body."""
