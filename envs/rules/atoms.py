"""The reading of one atom ``e op 0`` that the checker, the grounding and the solvers share.

An atom holds within a relative tolerance ``TOL`` of the size s of its terms (sum of their absolute
values): ``<=``, ``>=``, ``=`` hold when they miss by at most TOL·s; ``<``, ``>``, ``!=`` must hold by
more than TOL·s, so an atom and its negation never both hold. With integer codes and coefficients
the tolerance never decides (a miss is at least 1); it absorbs float round-off of continuous sums.
"""

from __future__ import annotations

import numpy as np

TOL = 1e-9  # the relative tolerance of every atom
OP_CODES = {"<=": 0, "<": 1, ">=": 2, ">": 3, "=": 4, "==": 4, "!=": 5}
NEGATION = {"<=": ">", "<": ">=", ">=": "<", ">": "<=", "=": "!=", "==": "!=", "!=": "="}


def truth(op: np.ndarray | int, e: np.ndarray, s: np.ndarray, tol: float = TOL) -> np.ndarray:
    """Whether ``e op 0`` holds (op codes of ``OP_CODES``, one per column or one for all) with slack tol·s."""
    op = np.broadcast_to(np.asarray(op), np.shape(e))
    t = tol * s
    return np.select([op == 0, op == 1, op == 2, op == 3, op == 4],
                     [e <= t, e < -t, e >= -t, e > t, np.abs(e) <= t], np.abs(e) > t)
