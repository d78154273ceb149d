"""GeCo (Schleich et al. 2021): genetic search for counterfactuals under PLAF constraints, in real time.

``GeCo(...).fit(world, D).solve(world, x)``; ``Plaf`` is the constraint language, ``ADULT`` and
``CREDIT`` the paper's Appendix A.1 programs.
"""

from solvers.geco.plaf import ADULT, CREDIT, Plaf, PlafError, default_program
from solvers.geco.search import GeCo

__all__ = ["ADULT", "CREDIT", "GeCo", "Plaf", "PlafError", "default_program"]
