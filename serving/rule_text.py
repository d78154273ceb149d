"""The world's rules and features as a person reads them (the page, ``GET /schema``; issue 55).

- :func:`feature_text`: per raw feature of a served tabular run its display name, unit and ``time``
  (the unit in which only time moves it: age in years), from the run's spec: a run on the user's
  table stored it (``world/spec.yaml``), a bundled data set has one (``data_gen.spec.spec_from_dataset``);
  nothing (the column names) where neither is found.
- :func:`describe_rules`: each compiled rule (``envs.rules.CompiledRules.names``) as one sentence, with
  the raw features it reads: "age rises with education: raising education takes at least 4 years",
  "loan duration falls by at most 12 months", "job cannot go from skilled employee to unskilled
  resident". A PLAF statement of another form is read word by word ("if the new X is above the
  current X, then ...").
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("recourse_gym.serve")


@dataclass(frozen=True)
class FeatureText:
    """How one raw feature reads: its name for people, its unit, and the unit time moves it in ("": not time)."""

    display: str
    unit: str = ""
    time: str = ""


def feature_text(svc: Any) -> dict[str, FeatureText]:
    """Display name, unit and time of each raw feature of a served tabular run (by feature name)."""
    spec = None
    try:
        path = getattr(svc, "run_dir", None)
        stored = None if path is None else path / "world" / "spec.yaml"
        if stored is not None and stored.exists():
            import yaml

            from data_gen.spec import DataSpec

            spec = DataSpec.from_dict(yaml.safe_load(stored.read_text()))
        elif (getattr(svc, "tab", None) or {}).get("dataset"):
            from data_gen.spec import spec_from_dataset

            spec = spec_from_dataset(svc.tab["dataset"])
    except Exception as err:  # the page falls back to the column names
        log.warning("the run's spec cannot be read for the page (%s); showing column names", err)
    out = {}
    for f in getattr(spec, "features", ()) or ():
        out[f.name] = FeatureText(f.display or _words(f.name), f.unit or "",
                                  getattr(f, "time", "") if f.mutability == "increase" else "")
    return out


def _words(name: str) -> str:
    return name.replace("_", " ").replace("-", " ").strip()


def _num(v: float) -> str:
    return format(float(v), ",g")


def amount(v: float, unit: str) -> str:
    """``12 months``, ``1 year``, ``5,000 DM``."""
    if not unit:
        return _num(v)
    u = unit[:-1] if float(v) == 1 and unit.endswith("s") and len(unit) > 2 else unit
    return f"{_num(v)} {u}"


_OPS = {">=": "is at least", "<=": "is at most", "!=": "is not", "==": "equals", "=": "equals", ">": "is above",
        "<": "is below", "&&": "and", "||": "or"}


class _Reader:
    def __init__(self, rules: Any, text: dict[str, FeatureText]):
        self.rules = rules
        self.text = text
        self.names = [r.name for r in rules.raws]
        alt = "|".join(re.escape(n) for n in sorted(self.names, key=len, reverse=True))
        self._same = re.compile(rf"^x_cf\.({alt}) (=|>=|<=) x\.({alt})$")
        self._implies = re.compile(rf"^IF x_cf\.({alt}) > x\.({alt}) THEN x_cf\.({alt}) >= x\.({alt}) \+ ([0-9.eE+-]+)$")
        self._ref = re.compile(rf"\b(x_cf|x)\.({alt})(?![\w-])")
        schema = rules.schema
        self.ordinal = {r.name for r in rules.raws if r.kind == "numeric" and schema.features[r.columns[0]].kind == "ordinal"}

    def d(self, f: str) -> str:
        return self.text[f].display if f in self.text else _words(f)

    def unit(self, f: str) -> str:
        return self.text[f].unit if f in self.text else ""

    def time(self, f: str) -> str:
        return self.text[f].time if f in self.text else ""

    def per(self, f: str) -> str:
        """One step of ``f``: a level of an ordinal, one of its unit, or one unit."""
        if f in self.ordinal:
            return "level"
        u = self.unit(f)
        return (u[:-1] if u.endswith("s") and len(u) > 2 else u) or "unit"

    def sentence(self, name: str, statement: str) -> str:
        kinds = {s.name: s for s in self.rules.rules.steps} | {f.name: f for f in self.rules.rules.forbid} | \
            {a.name: a for a in self.rules.rules.links}
        obj = kinds.get(name)
        if name.endswith("(schema)"):
            f, word = name[: -len(" (schema)")].rsplit(": ", 1)
            return self._mutability(f, {"immutable": "=", "increase-only": ">=", "decrease-only": "<="}[word])
        if obj is not None and hasattr(obj, "kind"):  # a step bound
            up = obj.kind in ("max_increase", "max_levels_up")
            size = (f"{_num(obj.value)} level{'s' if obj.value != 1 else ''}" if "levels" in obj.kind
                    else amount(obj.value, self.unit(obj.feature)))
            return f"{self.d(obj.feature)} {'rises' if up else 'falls'} by at most {size}"
        if obj is not None and hasattr(obj, "source") and hasattr(obj, "feature"):  # a forbidden transition
            return f"{self.d(obj.feature)} cannot go from {obj.source} to {obj.target}"
        if obj is not None:  # a link
            return self._link(obj)
        return self._plaf(statement)

    def _mutability(self, f: str, op: str) -> str:
        if op == "=":
            return f"{self.d(f)} never changes"
        if op == ">=" and self.time(f):
            return f"{self.d(f)} only rises, with time"
        return f"{self.d(f)} never {'falls' if op == '>=' else 'rises'}"

    def _link(self, a: Any) -> str:
        src, dst, k = self.d(a.source), self.d(a.target), a.per_unit
        moves = "rises" if a.on == "up" else "falls"
        size = amount(abs(k), self.time(a.target) or self.unit(a.target))
        head = f"{dst} {'rises' if k > 0 else 'falls'} {'with' if a.on == 'up' else 'as'} {src}" \
            + ("" if a.on == "up" and k > 0 else f" {moves}")
        if self.time(a.target) and k > 0 and a.on == "up":
            return f"{head}: each {self.per(a.source)} of {src} takes at least {size}"
        return f"{head}: at least {size} {'more' if k > 0 else 'less'} for each {self.per(a.source)} {src} {moves}"

    def _plaf(self, statement: str) -> str:
        s = re.sub(r"^PLAF\s+", "", statement.strip(), flags=re.I)
        m = self._same.match(s)
        if m and m.group(1) == m.group(3):
            return self._mutability(m.group(1), m.group(2))
        m = self._implies.match(s)
        if m and m.group(1) == m.group(2) and m.group(3) == m.group(4) and float(m.group(5)) > 0:
            a, b, c = m.group(1), m.group(3), float(m.group(5))
            if self.time(b):
                return f"{self.d(b)} rises with {self.d(a)}: raising {self.d(a)} takes at least {amount(c, self.time(b))}"
            return f"{self.d(b)} rises with {self.d(a)}: raising {self.d(a)} raises {self.d(b)} by at least " \
                   f"{amount(c, self.unit(b))}"
        s = self._ref.sub(lambda m: f"the {'new' if m.group(1) == 'x_cf' else 'current'} {self.d(m.group(2))}", s)
        s = re.sub(r"^IF\s+(.*?)\s+THEN\s+", r"if \1, then ", s)
        return " ".join(_OPS.get(t, t) for t in s.split(" "))

    def features(self, rule: int) -> list[str]:
        cols: set[int] = set()
        for c in self.rules.clauses:
            if c.rule == rule:
                for a in (*c.antecedent, c.consequent):
                    cols |= set(a.cf_cols) | set(a.x_cols)
        return [r.name for r in self.rules.raws if cols & set(r.columns)]


def describe_rules(rules: Any, text: dict[str, FeatureText] | None = None) -> list[dict[str, Any]]:
    """Each rule of ``rules`` (``envs.rules.CompiledRules``; None: no rules) as ``{name, text, features,
    from_schema}``: its name as reports give it, one sentence, the raw features it reads, and whether it is
    the schema's mutability (shown on the form's fields already)."""
    if rules is None:
        return []
    r = _Reader(rules, text or {})
    out = []
    for i, (name, statement) in enumerate(zip(rules.names, rules.statements, strict=True)):
        try:
            sentence = r.sentence(name, statement)
        except Exception:  # a form the reader does not know: the rule as written
            sentence = name
        out.append({"name": name, "text": sentence[:1].upper() + sentence[1:] + ".", "features": r.features(i),
                    "from_schema": name.endswith("(schema)")})
    return out
