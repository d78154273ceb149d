"""The rule language as a user writes it (a data spec's ``rules:`` section, a run's ``rules.json``).

A :class:`RuleSet` names raw features (a schema's raw features: one per plain column, one per
one-hot group) and holds five kinds of rules::

    rules:
      plaf:                                   # PLAF statements, GeCo's syntax (paper §3)
        - PLAF IF x_cf.education-num > x.education-num THEN x_cf.age >= x.age + 4
      features:                               # per feature (``income: {...}`` directly under rules: too)
        income: {max_increase: 10000, max_decrease: 5000}        # raw units, numeric features
        education-num: {max_levels_up: 2, forbid: [[Masters, Bachelors]]}   # ordinal codes; no Masters -> Bachelors
      links:                                  # (``link:`` with one mapping too)
        - {from: education-num, to: age, per_unit: 1}            # a level of education costs a year of age
      weights:                                # cost weights: one number, or per direction
        income: {up: 2.0, down: 0.5}
        hours-per-week: 0.5

Nothing here knows a schema: :func:`envs.rules.compile_rules` resolves the names, checks kinds and
labels, and reports contradictions. This module only reads and writes the form (``from_dict``,
``to_dict``; JSON and YAML alike) and checks its shape, one line naming the rule per problem.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STEP_KEYS = ("max_increase", "max_decrease", "max_levels_up", "max_levels_down")
FEATURE_KEYS = (*STEP_KEYS, "forbid")
SECTIONS = ("plaf", "features", "links", "link", "weights")  # any other key of ``rules:`` is a feature


class RuleError(ValueError):
    """A rule that does not parse, names an unknown feature, does not fit its feature, or contradicts others."""


def _number(value: Any, where: str, *, integer: bool = False, nonzero: bool = False, sign: bool = False) -> float:
    """A finite number (>= 0 unless ``sign``; an integer where asked), or a RuleError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RuleError(f"{where}: expected a finite number, got {value!r}")
    if not sign and value < 0:
        raise RuleError(f"{where}: must be >= 0, got {value!r}")
    if integer and value != int(value):
        raise RuleError(f"{where}: must be a whole number of levels, got {value!r}")
    if nonzero and value == 0:
        raise RuleError(f"{where}: must not be 0")
    return float(value)


def _fmt(v: float) -> str:
    return f"{v:g}" if v == int(v) or abs(v) >= 1e-4 else repr(v)


@dataclass(frozen=True)
class StepBound:
    """``feature: {max_increase: v}`` (and the three others): x_cf.F - x.F <= v, or x.F - x_cf.F <= v."""

    feature: str
    kind: str  # one of STEP_KEYS; the *_levels_* forms are for ordinal features, the others for numbers
    value: float

    @property
    def name(self) -> str:
        return f"{self.feature}: {self.kind} {_fmt(self.value)}"


@dataclass(frozen=True)
class Forbid:
    """``feature: {forbid: [[a, b]]}``: an agent at level/category ``a`` may not move to ``b``."""

    feature: str
    source: Any  # a label (ordinal, categorical, binary) or a number (integer feature)
    target: Any

    @property
    def name(self) -> str:
        return f"{self.feature}: forbid {self.source} -> {self.target}"


@dataclass(frozen=True)
class Link:
    """``{from: F, to: G, per_unit: k, on: up}``: when F moves ``on``-ward by m > 0, G moves by k·m.

    per_unit > 0: x_cf.G - x.G >= k·m; per_unit < 0: x_cf.G - x.G <= k·m; m = x_cf.F - x.F (on: up)
    or x.F - x_cf.F (on: down); nothing is asked of G when F does not move that way.
    """

    source: str
    target: str
    per_unit: float
    on: str = "up"

    @property
    def name(self) -> str:
        return (f"link {self.source} -> {self.target} ({_fmt(self.per_unit)} per unit"
                f"{' of decrease' if self.on == 'down' else ''})")


@dataclass(frozen=True)
class Weight:
    """A feature's cost weight per direction; it multiplies the feature's normalised change."""

    feature: str
    up: float
    down: float


@dataclass(frozen=True)
class RuleSet:
    """The user's rules over raw features (see the module's docstring); empty: no rule beyond the schema."""

    plaf: tuple[str, ...] = ()
    steps: tuple[StepBound, ...] = ()
    forbid: tuple[Forbid, ...] = ()
    links: tuple[Link, ...] = ()
    weights: tuple[Weight, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.plaf or self.steps or self.forbid or self.links or self.weights)

    @property
    def features(self) -> set[str]:
        """Every raw feature a rule names outside its PLAF statements."""
        return ({s.feature for s in self.steps} | {f.feature for f in self.forbid} | {w.feature for w in self.weights}
                | {a for link in self.links for a in (link.source, link.target)})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> RuleSet:
        """The ``rules:`` section of a spec (or ``to_dict``'s output); None or {} gives no rules."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise RuleError(f"rules: expected a mapping (plaf, features, links, weights), got {type(d).__name__}")
        plaf = d.get("plaf") or ()
        if isinstance(plaf, str):
            plaf = [line.split("#", 1)[0].strip() for line in plaf.splitlines()]
        if not isinstance(plaf, list | tuple) or not all(isinstance(s, str) for s in plaf):
            raise RuleError("rules.plaf: expected a list of PLAF statements")
        if not isinstance(d.get("features") or {}, Mapping):
            raise RuleError("rules.features: expected a mapping feature -> {max_increase, ..., forbid}")
        feats = {str(k): v for k, v in (d.get("features") or {}).items()}
        for k, v in d.items():
            if k not in SECTIONS:
                if k in feats:
                    raise RuleError(f"rules: feature {k!r} is given both under features: and directly")
                feats[str(k)] = v
        steps, forbid = [], []
        for name, block in feats.items():
            where = f"rules: feature {name!r}"
            if not isinstance(block, Mapping):
                raise RuleError(f"{where}: expected a mapping of {', '.join(FEATURE_KEYS)}, got {block!r}")
            for k, v in block.items():
                if k not in FEATURE_KEYS:
                    raise RuleError(f"{where}: unknown rule {k!r} (known: {', '.join(FEATURE_KEYS)})")
                if k == "forbid":
                    forbid += _pairs(name, v)
                else:
                    steps.append(StepBound(str(name), k, _number(v, f"{where}: {k}", integer="levels" in k)))
        links = d.get("links", d.get("link")) or ()
        if "links" in d and "link" in d:
            raise RuleError("rules: give links under one key, links: or link:")
        links = [links] if isinstance(links, Mapping) else links
        if not isinstance(links, list | tuple):
            raise RuleError("rules.links: expected a list of {from, to, per_unit[, on]}")
        weights = d.get("weights") or {}
        if not isinstance(weights, Mapping):
            raise RuleError("rules.weights: expected a mapping feature -> weight or {up, down}")
        return cls(tuple(s.strip() for s in plaf if s.strip()), tuple(steps), tuple(forbid),
                   tuple(_link(v) for v in links), tuple(_weight(str(k), v) for k, v in weights.items()))

    def to_dict(self) -> dict[str, Any]:
        """The canonical form (``plaf``, ``features``, ``links``, ``weights``; empty sections left out)."""
        out: dict[str, Any] = {}
        if self.plaf:
            out["plaf"] = list(self.plaf)
        feats: dict[str, dict[str, Any]] = {}
        for s in self.steps:
            feats.setdefault(s.feature, {})[s.kind] = int(s.value) if "levels" in s.kind else s.value
        for f in self.forbid:
            feats.setdefault(f.feature, {}).setdefault("forbid", []).append([f.source, f.target])
        if feats:
            out["features"] = feats
        if self.links:
            out["links"] = [{"from": a.source, "to": a.target, "per_unit": a.per_unit, **({"on": a.on} if a.on != "up"
                                                                                            else {})} for a in self.links]
        if self.weights:
            out["weights"] = {w.feature: w.up if w.up == w.down else {"up": w.up, "down": w.down} for w in self.weights}
        return out

    def __add__(self, other: RuleSet) -> RuleSet:
        return RuleSet(self.plaf + other.plaf, self.steps + other.steps, self.forbid + other.forbid,
                       self.links + other.links, self.weights + other.weights)


def _pairs(feature: str, value: Any) -> list[Forbid]:
    where = f"rules: feature {feature!r}: forbid"
    if not isinstance(value, list | tuple) or not all(isinstance(p, list | tuple) and len(p) == 2 for p in value):
        raise RuleError(f"{where}: expected a list of [from, to] pairs, got {value!r}")
    return [Forbid(str(feature), _plain(a), _plain(b)) for a, b in value]


def _plain(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise RuleError(f"rules: forbid: a level is a label or a number, got {v!r}")
    return v


def _link(d: Any) -> Link:
    if not isinstance(d, Mapping):
        raise RuleError(f"rules.links: expected {{from, to, per_unit[, on]}}, got {d!r}")
    bad = [k for k in d if k not in ("from", "to", "per_unit", "on")]
    if bad:
        raise RuleError(f"rules.links: unknown field {bad[0]!r} (known: from, to, per_unit, on)")
    missing = [k for k in ("from", "to", "per_unit") if k not in d]
    if missing:
        raise RuleError(f"rules.links: link {dict(d)!r} has no {missing[0]!r}")
    link = Link(str(d["from"]), str(d["to"]), 1.0, str(d.get("on", "up")))
    k = _number(d["per_unit"], f"rules: {link.name}: per_unit", nonzero=True, sign=True)
    if link.on not in ("up", "down"):
        raise RuleError(f"rules: {link.name}: on must be up or down, got {link.on!r}")
    if link.source == link.target:
        raise RuleError(f"rules: {link.name}: a feature cannot be linked to itself")
    return Link(link.source, link.target, k, link.on)


def _weight(feature: str, v: Any) -> Weight:
    where = f"rules: weights: {feature!r}"
    if isinstance(v, Mapping):
        bad = [k for k in v if k not in ("up", "down")]
        if bad or not v:
            raise RuleError(f"{where}: expected a number or {{up, down}}, got {dict(v)!r}")
        up = _number(v.get("up", 1.0), f"{where}: up")
        return Weight(feature, up, _number(v.get("down", 1.0), f"{where}: down"))
    w = _number(v, where)
    return Weight(feature, w, w)
