"""Labels on the black-box route (issue 54): GeCo answers each rejected agent, a heuristic, no certificate.

A user's model that recourse-gym cannot translate into a white box (``data_gen.user_model.BlackBoxModel``)
cannot be read by MACE. :class:`GecoLabeller` is the labelling solver ``label_tabular`` then runs: GeCo
(``solvers.geco``) fitted on the training rows, in the distance of the run's norm, whose first answer the
world's model (the user's own decision) accepts is the label. Nothing it returns is certified: its answers
carry no ``delta_min`` (``label_tabular`` stores 0, so no label counts as certified), and where GeCo finds
nothing (``no_recourse`` in its search space is no proof) the status is ``unknown``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from envs.recourse import Recourse
from solvers.geco import GeCo, Plaf

NORM_WEIGHTS = {"zero": (1.0, 0.0, 0.0), "one": (0.0, 1.0, 0.0), "infty": (0.0, 0.0, 1.0)}  # GeCo's Eq. 2 weights


class GecoLabeller:
    """GeCo as a labelling solver: ``solve(world, x)`` -> one verified answer or ``unknown``, never certified."""

    name = "geco"
    label = "GeCo"  # the progress bar's name

    def __init__(self, world: Any, data: np.ndarray, *, norm: str = "one", seed: int = 0, n_diverse: int = 1):
        """``data``: the training rows (GeCo's active domains); ``norm``: the run's distance; ``n_diverse``:
        answers GeCo keeps (the first the model accepts is the label)."""
        if norm not in NORM_WEIGHTS:
            raise ValueError(f"norm: expected one of {sorted(NORM_WEIGHTS)}, got {norm!r}")
        alpha, beta, gamma = NORM_WEIGHTS[norm]
        self.norm, self.seed = norm, int(seed)
        self.geco = GeCo(plaf=Plaf(), n_diverse=n_diverse, alpha=alpha, beta=beta, gamma=gamma,
                         seed=seed).fit(world, np.asarray(data, float))

    def settings(self) -> dict[str, Any]:
        """What the labels' manifest records about the solver."""
        return {"solver": "geco", "certified": False, "norm": self.norm, "seed": self.seed,
                "n_diverse": int(self.geco.n_diverse)}

    def solve(self, world: Any, x: np.ndarray) -> list[Recourse]:
        """GeCo's first answer for ``x`` that ``world.accepts`` (the user's own decision), or ``unknown``."""
        t0 = time.perf_counter()
        rs = self.geco.solve(world, x)
        for r in rs:
            if r.status != "ok" or r.extra.get("reason") == "already_positive":
                continue
            cf = np.asarray(r.extra["counterfactual"], float)
            if bool(world.accepts(cf[None])[0]):
                r.extra.pop("delta_min", None)  # no lower bound: the label is not certified
                return [r]
        why = rs[0].extra.get("reason", rs[0].status) if rs else "no answer"
        return [Recourse.none(self.name, status="unknown", runtime=time.perf_counter() - t0,
                              reason=f"GeCo found no answer the model accepts ({why})")]
