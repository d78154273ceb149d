"""Fuzzing a tabular service under the world's rules (issue 55): random raw records in, every served
answer re-checked row by row by ``tests/rules_reference.py`` (the direct reading of the rule
language, independent of ``envs.rules``' compiled checker that the service uses).

Shared by ``tests/test_rules_fuzz.py`` (a few hundred records per data set) and
``benchmarks/rules_fuzz.py`` (5,000 per data set). ``PLAF`` reads the default rules' PLAF statements
(``data_gen/default_rules.py``) as Python functions of the raw values (a one-hot group's value is its
category index, an ordinal's its code).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from tests.rules_reference import broken

PLAF = {
    "PLAF x_cf.age >= x.age": lambda x, c: c["age"] >= x["age"],
    "PLAF x_cf.education-num >= x.education-num": lambda x, c: c["education-num"] >= x["education-num"],
    "PLAF x_cf.marital-status = x.marital-status": lambda x, c: c["marital-status"] == x["marital-status"],
    "PLAF x_cf.relationship = x.relationship": lambda x, c: c["relationship"] == x["relationship"],
    "PLAF x_cf.sex = x.sex": lambda x, c: c["sex"] == x["sex"],
    "PLAF x_cf.native-country = x.native-country": lambda x, c: c["native-country"] == x["native-country"],
    "PLAF IF x_cf.education-num > x.education-num THEN x_cf.age >= x.age + 4":
        lambda x, c: not c["education-num"] > x["education-num"] or c["age"] >= x["age"] + 4,
    "PLAF x_cf.employment >= x.employment": lambda x, c: c["employment"] >= x["employment"],
    "PLAF x_cf.personal_status_sex = x.personal_status_sex":
        lambda x, c: c["personal_status_sex"] == x["personal_status_sex"],
    "PLAF x_cf.foreign_worker = x.foreign_worker": lambda x, c: c["foreign_worker"] == x["foreign_worker"],
    "PLAF x_cf.credit_history = x.credit_history": lambda x, c: c["credit_history"] == x["credit_history"],
    "PLAF IF x_cf.employment > x.employment THEN x_cf.age >= x.age + 1":
        lambda x, c: not c["employment"] > x["employment"] or c["age"] >= x["age"] + 1,
}


def fuzz_records(codec: Any, n: int, seed: int = 0, edge: float = 0.1) -> list[dict[str, Any]]:
    """``n`` random raw records over the codec's domains: every level of a categorical, ordinal or
    binary feature equally likely, a number uniform in its observed range (a whole number where it
    must be one), at one of its bounds with probability ``edge``."""
    rng = np.random.default_rng(seed)
    cols = []
    for d in codec.domains:
        if d.levels:
            cols.append([d.levels[i] for i in rng.integers(0, len(d.levels), n)])
            continue
        lo, hi = d.lower, d.upper
        v = rng.integers(int(lo), int(hi) + 1, n).astype(float) if d.kind == "integer" else rng.uniform(lo, hi, n)
        at = rng.random(n) < edge
        v[at] = np.where(rng.random(at.sum()) < 0.5, lo, hi)
        cols.append([int(a) if d.kind == "integer" else float(a) for a in v])
    return [{d.name: col[i] for d, col in zip(codec.domains, cols, strict=True)} for i in range(n)]


def apply(record: dict[str, Any], changes: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(record)
    for c in changes:
        assert out[c["feature"]] == c["from"], (c, record)
        out[c["feature"]] = c["to"]
    return out


def check_answers(svc: Any, rules: Any, records: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Every counterfactual served in ``rows`` (the answer and its alternatives) re-checked for its
    record: accepted by the served model and breaking no rule of ``rules`` (a ``RuleSet``) by the
    row-by-row reference. Returns counts by status and method, and the violations found (must be none)."""
    schema = svc.world.schema
    out: dict[str, Any] = {"records": len(records), "status": Counter(), "method": Counter(), "checked": 0,
                           "alternatives": 0, "violations": [], "rejected_by_model": 0,
                           "refused_by": Counter(), "rules_bearing": Counter()}
    for rec, row in zip(records, rows, strict=True):
        out["status"][row["status"]] += 1
        for name in row.get("refused_by") or ():
            out["refused_by"][name] += 1
        if row["status"] != "ok":
            continue
        out["method"][row["method"]] += 1
        for name in row.get("rules") or ():
            out["rules_bearing"][name] += 1
        x = svc.codec.encode([rec])[0]
        for k, changes in enumerate([row["changes"], *(a["changes"] for a in row["alternatives"])]):
            cf = svc.codec.encode([apply(rec, changes)])[0]
            out["checked"] += 1
            out["alternatives"] += k > 0
            bad = broken(schema, rules, x, cf, PLAF)
            if bad:
                out["violations"].append({"record": rec, "changes": changes, "broken": bad})
            if not svc.world.accepts(cf[None])[0]:
                out["rejected_by_model"] += 1
    return out
