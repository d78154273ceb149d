"""The fallback chain of a tabular service: GeCo, then MACE, for a record the generator could not answer.

:class:`FallbackChain` is a mixin of :class:`serving.tabular.TabularService` (its methods run in the
service's fallback process, on the service's solver state: ``world``, ``geco``, ``codec``, ``jobs``,
``mace_params``, ``black_box``); :class:`Answer` is one record's answer, in encoded rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from serving.tabular_rules import merge, no_recourse_rules

log = logging.getLogger("recourse_gym.serve")


@dataclass
class Answer:
    """The answer for one record (encoded rows; made JSON-ready by :meth:`TabularService.records`)."""

    status: str  # ok | no_recourse | already_positive | unknown
    cf: np.ndarray | None = None
    distance: float | None = None
    method: str = "fallback"
    kind: str = "fallback"  # generator | geco | mace | model | fallback: what the counters count
    optimal: bool | None = None
    verified: bool = False
    alternatives: list[tuple[np.ndarray, float, str]] = field(default_factory=list)
    budget_exceeded: bool = False
    refused_by: tuple[str, ...] = ()  # the world's rules that refused a candidate (said when none is served)


class FallbackChain:
    """GeCo, then MACE (GeCo only on a black box), on the service's solver state."""

    def _geco_answers(self, x: np.ndarray) -> list[tuple[np.ndarray, float, str]]:
        """GeCo's verified counterfactuals for one record, nearest first (cached by record)."""
        key = ("geco", x.tobytes())
        hit = self.jobs.get([key])[0]
        if hit is not None:
            return hit
        out = self._in_process("_geco_answers_here", x)
        self.jobs.put([key], [out])
        return out

    def _geco_answers_here(self, x: np.ndarray) -> list[tuple[np.ndarray, float, str]]:
        return self._geco_search(x)[0]

    def _geco_search(self, x: np.ndarray) -> tuple[list[tuple[np.ndarray, float, str]], tuple[str, ...]]:
        """GeCo's verified counterfactuals for ``x``, nearest first, and the rules that refused others."""
        rs = self.geco.solve(self.world, x)
        rows = [r.final_state for r in rs if r.status == "ok" and r.final_state is not None]
        out: list[tuple[np.ndarray, float, str]] = []
        if not rows:
            return out, ()
        CF = np.vstack(rows)
        ok, rule = self.check(np.repeat(x[None], len(CF), 0), CF)
        dist = self.codec.distance(np.repeat(x[None], len(CF), 0), CF)
        out = sorted(((CF[j], float(dist[j]), "geco") for j in np.flatnonzero(ok)), key=lambda t: t[1])
        return out, merge(rule)

    def _chain(self, x: np.ndarray, n_diverse: int) -> Answer:
        """GeCo, then MACE (GeCo only on a black box): the answer for a record the generator could not answer."""
        return self._in_process("_chain_here", x, n_diverse)

    def _chain_here(self, x: np.ndarray, n_diverse: int) -> Answer:
        refused: tuple[str, ...] = ()  # the rules that refused GeCo's candidates (said if nothing is found)
        if self.geco is not None:
            key = ("geco", x.tobytes())
            try:
                found = self.jobs.get([key])[0]
                if found is None:
                    found, refused = self._geco_search(x)
                    self.jobs.put([key], [found])
            except Exception:
                log.exception("GeCo failed; trying MACE")
                found = []
            if found:
                cf, d, _ = found[0]
                return Answer("ok", cf, d, "geco", "geco", None, True, found[1:])
        if getattr(self, "black_box", False):  # MACE cannot read the user's model: no proof, no answer
            return Answer("unknown", method="geco", kind="fallback", refused_by=refused)
        from solvers.mace import MACE

        rs = MACE(**{**self.mace_params, "n_diverse": 1 + n_diverse}).solve(self.world, x)
        first = rs[0]
        if first.status == "no_recourse":  # MACE's proof: no plausible counterfactual (that keeps the rules)
            why = no_recourse_rules(self, x, first.extra.get("reason"))
            return Answer("no_recourse", method="mace", kind="mace", optimal=True, verified=False,
                          refused_by=merge(why, refused if why else ()))
        if first.status != "ok":
            log.warning("MACE gave up: %s", first.extra.get("reason", first.status))
            return Answer("unknown", method="mace", kind="fallback", refused_by=refused)
        CF = np.vstack([r.final_state for r in rs])
        X = np.repeat(x[None], len(CF), 0)
        (ok, rule), dist = self.check(X, CF), self.codec.distance(X, CF)
        if not ok[0]:
            log.error("MACE's counterfactual failed the serving checks: %s",
                      rule[0] or self.codec.violations(x, CF[0])[0] or "the model rejects it")
            return Answer("unknown", method="mace", kind="fallback", refused_by=merge(refused, rule[0]))
        alts = [(CF[j], float(dist[j]), "mace") for j in range(1, len(CF)) if ok[j]]
        return Answer("ok", CF[0], float(dist[0]), "mace", "mace", bool(first.optimal), True, alts)
