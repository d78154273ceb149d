"""MACE (Karimi et al. 2020): nearest plausible, diverse counterfactuals with a certified lower bound.

Backends: ``z3`` (the paper's SMT formulation and Algorithm 1) and ``milp`` (HiGHS, same semantics).
"""

from solvers.mace.distance import deltas, distance, distance_features, norm_weights
from solvers.mace.mace import MACE

__all__ = ["MACE", "deltas", "distance", "norm_weights", "distance_features"]
