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


# Per op code (OP_CODES): ``e op 0`` reads as ``a >= -t`` (or ``a > t`` where strict) for a = sign·e, or
# sign·|e| for = and !=; one product and one comparison per entry, whatever the mix of ops.
_SIGN = np.array([-1.0, -1.0, 1.0, 1.0, -1.0, 1.0])
_ABS = np.array([False, False, False, False, True, True])
_STRICT = np.array([False, True, False, True, False, True])


def truth(op: np.ndarray | int, e: np.ndarray, s: np.ndarray, tol: float = TOL) -> np.ndarray:
    """Whether ``e op 0`` holds (op codes of ``OP_CODES``, one per column or one for all) with slack tol·s."""
    op = np.asarray(op)
    e = np.asarray(e, float)
    t = tol * np.asarray(s, float)
    a = np.where(_ABS[op], np.abs(e), e) * _SIGN[op]  # negation is exact: no reading changes
    return np.where(_STRICT[op], a > t, a >= -t)
