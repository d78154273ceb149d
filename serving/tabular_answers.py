"""A tabular service's answers as JSON rows, its counters' rates and its ``/model`` description.

:class:`serving.tabular.TabularService` keeps the answering; this module formats what it answered
(``records``), what it counted (``stats``) and what it serves (``describe``). A run on the black-box
route (the user's model without a white box: GeCo labels, GeCo the only fallback) is described as
"not certified", and none of its rows says ``optimal``. A ``no_recourse`` or ``unknown`` row names
the world's rules that refused the candidates found (``refused_by``; null otherwise), an ``ok`` row the
user's rules that bear on its change (``rules``; null where the world has none), and ``/model``
lists the rules and the generator answers each refused (``rule_refusals``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from serving.rounding import round_answers
from serving.tabular_rules import bearing_rules

METHODS = ("generator", "geco", "mace")  # what answered a record (the counters)
OUTCOMES = ("already_positive", "unknown", "no_recourse")  # records no method answered with a change
NOT_CERTIFIED = "not certified: the black-box route (the user's model has no white box; GeCo, no MACE)"


def answer_records(svc: Any, X: np.ndarray, answers: list[Any], t0: float | None = None) -> list[dict[str, Any]]:
    """JSON-ready rows of ``svc``'s answers for the encoded records ``X``; ``latency_ms`` from ``t0``."""
    answers = round_answers(svc, X, answers)  # values a person can act on (serving/rounding.py)
    codec, certifies = svc.codec, not getattr(svc, "black_box", False)
    rules = getattr(svc, "rules", None)
    done = [i for i, a in enumerate(answers) if a.status == "ok" and a.cf is not None]
    bearing = dict(zip(done, bearing_rules(rules, X[done], np.array([answers[i].cf for i in done])), strict=True)) \
        if rules is not None and done else {}
    out = []
    for i, (x, a) in enumerate(zip(X, answers, strict=True)):
        ok = a.status == "ok" and a.cf is not None
        out.append({
            "status": a.status,
            "changes": codec.changes(x, a.cf) if ok else [],
            "distance": a.distance if a.status in ("ok", "already_positive") else None,
            "verified": bool(a.verified), "method": a.method, "optimal": a.optimal if certifies else None,
            "alternatives": [{"changes": codec.changes(x, cf), "distance": d, "verified": True, "method": m}
                             for cf, d, m in a.alternatives],
            "budget_exceeded": a.budget_exceeded,
            "refused_by": list(a.refused_by) if a.status in ("no_recourse", "unknown") and a.refused_by else None,
            "rules": bearing.get(i) if ok and rules is not None else None,
            "latency_ms": None if t0 is None else (time.perf_counter() - t0) * 1e3,
        })
    return out


def service_stats(svc: Any) -> dict[str, Any]:
    """``svc``'s counters, and per method and outcome its share of the records that needed recourse."""
    with svc._lock:
        c = dict(svc.counters)
        c.setdefault("rule_refusals", 0)
    need = c["records"] - c["already_positive"]
    rates = {k: (c[k] / need if need else 0.0) for k in (*METHODS, "unknown", "no_recourse")}
    fallbacks = c["geco"] + c["mace"] + c["unknown"] + c["no_recourse"]
    rates["fallback"] = fallbacks / need if need else 0.0
    return {"counters": c, "rates": rates}


def fallback_chain(svc: Any) -> list[str]:
    """The solvers after the generator, in order: GeCo (when fitted), then MACE (never on a black box)."""
    return (["geco"] if svc.geco is not None else []) + ([] if getattr(svc, "black_box", False) else ["mace"])


def describe_service(svc: Any) -> dict[str, Any]:
    """Provenance and counters of ``svc`` (``/model``): names and hashes, never filesystem paths."""
    metrics = svc.run.metrics if isinstance(getattr(svc.run, "metrics", None), dict) else None
    st = service_stats(svc)
    black_box = bool(getattr(svc, "black_box", False))
    return {
        "kind": "tabular", "run": str(svc.config.get("name", svc.run_dir.name)), "run_dir": svc.run_dir.resolve().name,
        "dataset": svc.tab.get("dataset"), "model_class": svc.tab.get("model"),
        "world": getattr(svc.world, "name", None), "generator": svc.model_name,
        "generators": sorted(svc.run.generators), "fingerprint": svc.fingerprint,
        "features": [{"name": d.name, "kind": d.kind, "mutability": d.mutability} for d in svc.codec.domains],
        "fallback": {"chain": fallback_chain(svc),
                     "budget_ms": None if svc.fallback_budget_s is None else svc.fallback_budget_s * 1e3,
                     "cached_answers": len(svc.jobs.cache),
                     "route": "black-box" if black_box else "white-box",
                     "certificate": NOT_CERTIFIED if black_box else "MACE's answers (optimal: true) are certified"},
        "max_batch": svc.max_batch, "max_diverse": svc.max_diverse,
        "metrics": metrics, "uptime_s": time.time() - svc.started,
        "counters": st["counters"], "rates": st["rates"],
        "rules": None if svc.rules is None else list(svc.rules.names),
        "rule_refusals": dict(svc.rule_refusals),
        "remote_model": None if getattr(svc, "remote", None) is None else {
            "latency_ms": svc.remote.latency_s * 1e3, "calls": svc.remote.calls, "rows": svc.remote.rows},
    }
