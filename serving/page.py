"""The recommendation page for people: ``GET /`` on every served run, over the public JSON API.

The page is one static HTML file with plain JavaScript and a style sheet (``serving/static/``; no
build step, no template engine). It reads the form from ``GET /schema``, asks ``POST /recommend``
exactly as a program does, and shows what comes back: so what a person sees is what a program
gets. Two JSON endpoints exist for it and are part of the API (in the OpenAPI schema):

- ``GET /schema``: the request's fields as a form: each raw feature with its domain (the levels of
  a category or ordinal, the observed range and grid step of a number), its mutability, and the
  request's shape (a raw record, or a capability agent ``{"x": [...], "group": g}``); the served
  method and, where answers can be certified, the certificate's tolerance; on a tabular run each
  feature's display name, unit and ``time`` (only time moves it: the page says "in 4 years") from the
  run's spec, and the world's rules as sentences (:mod:`serving.rule_text`);
- ``GET /example``: a random record of the test split that the model rejects (``seed`` picks one
  reproducibly), ready to send to ``/recommend``.

:func:`add_page` registers them on a tabular (:mod:`serving.tabular_app`), sequential
(:mod:`serving.sequential`) or capability (:mod:`serving.app`) app.
"""

from __future__ import annotations

import inspect
import logging
import random
import threading
from functools import cache
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import Response
from pydantic import BaseModel, Field

from serving.schemas import ERRORS, ErrorResponse

log = logging.getLogger("recourse_gym.serve")

STATIC = Path(__file__).with_name("static")
ASSETS = {"": ("index.html", "text/html; charset=utf-8"), "page.js": ("page.js", "text/javascript; charset=utf-8"),
          "page.css": ("page.css", "text/css; charset=utf-8")}
# The page talks only to this origin: no inline script, no third-party resource.
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'"


class FormOption(BaseModel):
    """One allowed value of a select: the value the API takes and its name."""

    value: str | int | float = Field(description="the value to send, as the API takes it")
    label: str = Field(description="its name for people")


class FormField(BaseModel):
    """One request field as a form field."""

    name: str = Field(description="the request field (a raw feature; for a capability agent the feature's name)")
    label: str = Field(description="the name for people")
    input: Literal["select", "number", "checkbox"] = Field(description="the form control that fits the domain")
    kind: str = Field(description="real | integer | ordinal | binary | categorical | capability | group")
    mutability: Literal["free", "immutable", "increase", "decrease"] = Field(
        description="immutable: never changed by a recommendation; increase/decrease: only raised/lowered")
    options: list[FormOption] | None = Field(None, description="the allowed values (select), in order")
    minimum: float | None = Field(None, description="numbers: the observed minimum")
    maximum: float | None = Field(None, description="numbers: the observed maximum")
    step: float | None = Field(None, description="numbers: the resolution answers are rounded to (null: any)")
    description: str = Field(description="the domain and mutability in one line")
    unit: str | None = Field(None, description="numbers: the unit of its values (the run's spec; null: none given)")
    time: str | None = Field(None, description="only time moves it (an increase-only number such as age), in this "
                                               "unit: a change is said as waiting ('in 4 years'); null: not time")


class RuleText(BaseModel):
    """One of the world's rules, as a sentence."""

    name: str = Field(description="the rule's name, as /model lists it and refused_by gives it")
    text: str = Field(description="the rule in plain words")
    features: list[str] = Field(description="the raw features it reads")
    from_schema: bool = Field(description="the schema's mutability (shown on the form's fields already)")


class Certificate(BaseModel):
    """How close to optimal an answer marked ``optimal`` is certified to be."""

    rel_tol: float = Field(description="relative gap allowed: distance - lower bound <= max(rel_tol * distance, epsilon)")
    epsilon: float = Field(description="absolute floor of the allowed gap")


class FormSchema(BaseModel):
    """The request of ``POST /recommend`` as a form, and what the answers carry."""

    kind: Literal["tabular", "sequential", "capability"]
    title: str = Field(description="the served run in words")
    method: str = Field(description="the served generator or policy")
    body: Literal["record", "agent"] = Field(
        description="record: a JSON object of the fields; agent: {'x': [the capability fields in order, 0/1], 'group': g}")
    fields: list[FormField]
    max_diverse: int = Field(description="the most alternatives a request may ask for (n_diverse); 0: not offered")
    certificate: Certificate | None = Field(description="the tolerance of 'optimal' (null: never certified)")
    rules: list[RuleText] = Field(default_factory=list, description="the world's rules, each as a sentence "
                                  "(empty: no rules beyond the fields' mutability)")


class Example(BaseModel):
    """A rejected record of the test split, as ``POST /recommend`` takes it."""

    record: dict[str, Any] = Field(description="the request body (without n_diverse)")
    index: int = Field(description="its position among the test split's rejected records")
    count: int = Field(description="how many rejected records the test split has")


NOT_FOUND = {"model": ErrorResponse, "description": "the run's test split is not available here (no example)"}
BAD_SEED = {"model": ErrorResponse, "description": "seed is not an integer in [0, 2^32 - 1]; detail names it"}


def _label(name: str) -> str:
    return name.replace("_", " ").replace("-", " ").strip()


def _kind(svc: Any) -> str:
    return getattr(svc, "kind", "capability")


def record_fields(codec: Any, steps: dict[str, float] | None = None, text: dict[str, Any] | None = None
                  ) -> list[FormField]:
    """The form fields of a :class:`~serving.records.RecordCodec`'s raw features (``steps``: the
    grid of real features, by name; ``text``: display name, unit and time by name, ``serving.rule_text``)."""
    out = []
    for d in codec.domains:
        t = (text or {}).get(d.name)
        common = {"name": d.name, "label": t.display if t else _label(d.name), "kind": d.kind,
                  "mutability": d.mutability, "description": d.describe(), "unit": (t.unit or None) if t else None,
                  "time": (t.time or None) if t and d.mutability == "increase" and not d.levels else None}
        if d.levels:
            opts = [FormOption(value=v, label=lab if str(v) == lab else f"{v} ({lab})")
                    for v, lab in zip(d.levels, d.labels, strict=True)]
            out.append(FormField(input="select", options=opts, **common))
        else:
            step = 1.0 if d.kind == "integer" else (steps or {}).get(d.name)
            out.append(FormField(input="number", minimum=d.lower, maximum=d.upper, step=step, **common))
    return out


def form_schema(svc: Any) -> FormSchema:
    """The form of a served run (tabular, sequential or capability)."""
    kind = _kind(svc)
    if kind == "capability":
        w = svc.world
        fields = [FormField(name=n, label=_label(n), input="checkbox", kind="capability", mutability="increase",
                            description="a capability the agent has (1) or lacks (0); actions only add capabilities")
                  for n in w.feature_names]
        if w.n_groups > 1:
            fields.append(FormField(name="group", label="group", input="select", kind="group", mutability="immutable",
                                    options=[FormOption(value=g, label=str(g)) for g in range(w.n_groups)],
                                    description=f"the agent's group, 0 to {w.n_groups - 1}: it decides which actions "
                                                "are available"))
        return FormSchema(kind=kind, title=f"run {svc.config.name}", method=svc.model_name, body="agent",
                          fields=fields, max_diverse=0, certificate=Certificate(rel_tol=0.0, epsilon=0.0))
    if kind == "tabular":
        from serving.rounding import rounder_for
        from serving.rule_text import describe_rules, feature_text

        steps, text = rounder_for(svc).resolutions(), feature_text(svc)
        tab = svc.tab
        defaults = {k: p.default for k, p in inspect.signature(_mace_init()).parameters.items()}
        mp = svc.mace_params
        cert = Certificate(rel_tol=float(mp.get("rel_tol", defaults["rel_tol"])),
                           epsilon=float(mp.get("epsilon", defaults["epsilon"])))
        return FormSchema(kind=kind, title=f"{tab.get('dataset')} ({tab.get('model')} model)", method=svc.model_name,
                          body="record", fields=record_fields(svc.codec, steps, text), max_diverse=svc.max_diverse,
                          certificate=None if getattr(svc, "black_box", False) else cert,  # black box: not certified
                          rules=[RuleText(**r) for r in describe_rules(svc.rules, text)])
    return FormSchema(kind=kind, title=f"{svc.world.name} world (ordered actions)", method=svc.model_name,
                      body="record", fields=record_fields(svc.codec), max_diverse=0, certificate=None)


def _mace_init() -> Any:
    from solvers.mace import MACE

    return MACE.__init__


def rejected_test_records(svc: Any) -> list[dict[str, Any]]:
    """The test split's records that the served model rejects, as request bodies."""
    kind = _kind(svc)
    if kind == "capability":
        from data_gen.dataset import load_dataset

        _, test = load_dataset(svc.dataset_info["path"]).split(svc.rule, svc.config.evaluation.test_fraction)
        keep = ~svc.world.accepts(test.X, test.groups)
        return [{"x": [int(v) for v in x], "group": int(g)} for x, g in zip(test.X[keep], test.groups[keep], strict=True)]
    from data_gen.loaders import load_data

    if kind == "tabular" and hasattr(svc.run, "data"):  # the run's own split (a user's table included)
        data = svc.run.data()
        return [svc.codec.decode(x) for x in data.X_test[~svc.world.accepts(data.X_test)]]
    if kind == "tabular":
        dataset, seed = svc.tab["dataset"], int(svc.tab.get("seed", 0))
    else:
        dataset, seed = svc.world.meta.get("dataset", svc.world.name), int(svc.world.meta.get("seed", 0))
    data = load_data(dataset, seed=seed)
    if data.encoder.schema != svc.codec.schema:
        raise ValueError(f"the bundled {dataset} data no longer matches the served run's encoder")
    X = data.X_test[~svc.world.accepts(data.X_test)]
    return [svc.codec.decode(x) for x in X]


@cache
def _asset(name: str) -> bytes:
    return (STATIC / name).read_bytes()


def add_page(app: FastAPI, svc: Any) -> None:
    """Register ``GET /`` (the page and its two static files) and the JSON endpoints it uses,
    ``GET /schema`` and ``GET /example``, on a served run's app."""
    form = form_schema(svc).model_dump(mode="json")  # built once: the schema does not change while serving
    examples: list[list[dict[str, Any]] | None] = []  # the rejected test records (None: unavailable), loaded once
    lock = threading.Lock()

    def asset(path: str) -> Any:
        name, media = ASSETS[path]

        def serve() -> Response:
            return Response(_asset(name), media_type=media,
                            headers={"Cache-Control": "no-cache", "Content-Security-Policy": CSP,
                                     "X-Content-Type-Options": "nosniff"})
        serve.__name__ = f"page_{name.replace('.', '_')}"
        return serve

    for path in ASSETS:
        app.add_api_route(f"/{path}", asset(path), methods=["GET"], include_in_schema=False)

    @app.get("/schema", response_model=FormSchema, summary="The request's fields as a form (the page reads it)",
             responses={413: ERRORS[413], 500: ERRORS[500]})
    async def schema() -> dict[str, Any]:
        return form

    @app.get("/example", response_model=Example, summary="A random rejected record of the test split",
             responses={404: NOT_FOUND, 413: ERRORS[413], 422: BAD_SEED, 500: ERRORS[500]})
    def example(seed: int | None = Query(None, ge=0, le=2**32 - 1, description="pick reproducibly (default: at random)")
                ) -> dict[str, Any]:
        with lock:
            if not examples:
                try:
                    examples.append(rejected_test_records(svc))
                except Exception as err:  # no data here: the page says so, the service keeps serving
                    log.warning("GET /example: the run's test split cannot be loaded (%s)", err)
                    examples.append(None)
        recs = examples[0]
        if recs is None:
            raise HTTPException(404, "example: the run's test split is not available on this server")
        if not recs:
            raise HTTPException(404, "example: the test split has no record the model rejects")
        i = (random.Random(seed) if seed is not None else random).randrange(len(recs))
        return {"record": recs[i], "index": i, "count": len(recs)}
