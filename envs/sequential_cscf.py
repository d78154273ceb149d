"""The Adult and German Credit action sets of CSCF (``shared/specs/sequential_worlds.md``).

CSCF reused the action-cost model of synth (Ramakrishnan et al., AAAI 2020); the effort,
consequences and conditions below are those of synth's public ``models/{adult,german}/actions.py``
and the discount graph is CSCF's ``adult_dependency_graph.py``, rewritten as data over the
encoded columns of ``data_gen.loaders`` (Adult: ``adult``; German: ``german_full``, which keeps
``other_debtors``). Two representation notes:

- Adult's ``education-num`` is stored as its ordinal code 0..15 (level 1..16 minus one): a
  condition "education-num < 16.5" on levels is "code < 15.5", and CSCF's tau
  1 - level / 32 is 31/32 - code / 32.
- Values are raw units. Each valued action has a value grid (``ADULT_GRIDS``/``GERMAN_GRIDS``),
  the shared discretization of the sequencer, the exact search and the RL environment.

Pre-conditions that synth has and the spec's table leaves implicit are kept (Naturalize needs a
foreign worker, GetGuarantor someone without one), so no action is a no-op.
"""

from __future__ import annotations

import numpy as np

from envs.schema import FeatureSchema
from envs.sequential_actions import Condition, Consequence, DiscountEdge, Effort, SequentialAction, Tau


def _grid(start: float, stop: float, step: float) -> tuple[float, ...]:
    return tuple(float(v) for v in np.arange(start, stop + step / 2, step))


ADULT_GRIDS: dict[str, tuple[float, ...]] = {
    "AddEducation": _grid(1, 15, 1),  # +levels
    "ChangeWorkingHours": _grid(1, 89, 1),  # hours per week, set to
    "ChangeCapitalLoss": _grid(100, 4900, 100),  # USD, set to
    "IncreaseCapitalGain": _grid(250, 30_000, 250),  # USD, added
    "WaitYears": _grid(1, 30, 1),  # years, added
}
GERMAN_GRIDS: dict[str, tuple[float, ...]] = {
    "WaitYears": _grid(1, 30, 1),  # years, added
    "ChangeCreditAmount": _grid(250, 20_000, 250),  # DM, set to
    "ChangeLoanPeriod": _grid(1, 72, 1),  # months, set to
    "AdjustLoanPeriod": _grid(250, 20_000, 250),  # DM, set to (duration follows)
}


def _require(schema: FeatureSchema, columns: list[str], world: str) -> None:
    missing = [c for c in columns if c not in schema.index]
    if missing:
        raise ValueError(f"schema: the {world} actions need columns {missing} (use the encoder of "
                         f"data_gen.loaders' {'german_full' if world == 'German' else 'adult'} data set)")


def adult_actions(schema: FeatureSchema, grids: dict[str, tuple[float, ...]] | None = None
                  ) -> list[SequentialAction]:
    """The 6 Adult actions of CSCF / synth over the ``adult`` encoding."""
    _require(schema, ["age", "education-num", "hours-per-week", "capital-gain", "capital-loss",
                      "occupation=Armed-Forces"], "Adult")
    g = {**ADULT_GRIDS, **(grids or {})}
    return [
        SequentialAction("AddEducation", "education-num", "add", Effort("abs", 1.0), g["AddEducation"], (1, 15),
                         integer=True, consequences=(Consequence("age", "shift", 2.0),),
                         post=(Condition("education-num", "<", 15.5), Condition("age", "<", 120)),
                         description="study: +1 education level per 2 years of age"),
        SequentialAction("ChangeWorkingHours", "hours-per-week", "set", Effort("abs", 10.0),
                         g["ChangeWorkingHours"], (1, 89), integer=True,
                         post=(Condition("hours-per-week", ">", 0), Condition("hours-per-week", "<", 90)),
                         description="work a different number of hours per week"),
        SequentialAction("ChangeCapitalLoss", "capital-loss", "set", Effort("abs", 1000.0),
                         g["ChangeCapitalLoss"], (0, 5000), pre=(Condition("capital-gain", "<", 1),),
                         post=(Condition("capital-loss", ">", 1), Condition("capital-loss", "<", 5000)),
                         description="realize a capital loss (only without capital gain)"),
        SequentialAction("Enlist", "occupation=Armed-Forces", "assign", Effort("const", 5.0),
                         pre=(Condition("occupation=Armed-Forces", "==", 0),),
                         description="join the armed forces"),
        SequentialAction("IncreaseCapitalGain", "capital-gain", "add", Effort("abs", 10_000.0),
                         g["IncreaseCapitalGain"], (0, 100_000), pre=(Condition("capital-loss", "<", 1),),
                         post=(Condition("capital-gain", ">", 0), Condition("capital-gain", "<", 100_000)),
                         description="realize a capital gain (only without capital loss)"),
        SequentialAction("WaitYears", "age", "add", Effort("abs", 1.0), g["WaitYears"], (1, 100), integer=True,
                         post=(Condition("age", "<", 120),), description="wait"),
    ]


def adult_discounts() -> list[DiscountEdge]:
    """CSCF's Adult feature relationship graph (its ``adult_dependency_graph.py``)."""
    edu = Tau("linear", "education-num", {"a": 31 / 32, "b": -1 / 32})  # 1 - level / 32, level = code + 1
    return [
        DiscountEdge("education-num", "capital-gain", edu),
        DiscountEdge("education-num", "occupation", edu),
        DiscountEdge("education-num", "workclass", edu),
        DiscountEdge("hours-per-week", "capital-gain", Tau("exp_ramp", "hours-per-week", {"lo": 0, "hi": 80})),
        DiscountEdge("hours-per-week", "education-num",
                     Tau("rules", "hours-per-week", {"rules": [["<", 20, 0.5], ["<", 30, 0.6], ["<=", 40, 0.7]],
                                                     "default": 1.0})),
    ]


def german_actions(schema: FeatureSchema, grids: dict[str, tuple[float, ...]] | None = None
                   ) -> list[SequentialAction]:
    """The 7 German Credit actions of CSCF / synth over the ``german_full`` encoding."""
    _require(schema, ["age", "foreign_worker", "credit_amount", "duration", "other_debtors=guarantor", "job"],
             "German")
    g = {**GERMAN_GRIDS, **(grids or {})}
    credit_post = (Condition("credit_amount", ">", 0), Condition("credit_amount", "<", 100_000))
    duration_post = (Condition("duration", ">", 0), Condition("duration", "<", 120))
    return [
        SequentialAction("WaitYears", "age", "add", Effort("abs", 1.0), g["WaitYears"], (1, 100), integer=True,
                         post=(Condition("age", "<", 120),), description="wait"),
        SequentialAction("Naturalize", "foreign_worker", "assign", Effort("const", 5.0), assign_value=0.0,
                         pre=(Condition("foreign_worker", "==", 1),), description="become a citizen"),
        SequentialAction("ChangeCreditAmount", "credit_amount", "set", Effort("rel_sq"), g["ChangeCreditAmount"],
                         (1, 99_999), pre=(Condition("age", ">", 15),), post=credit_post,
                         description="ask for a different amount"),
        SequentialAction("ChangeLoanPeriod", "duration", "set", Effort("rel_sq"), g["ChangeLoanPeriod"], (1, 119),
                         integer=True, post=duration_post, description="ask for a different duration (months)"),
        SequentialAction("AdjustLoanPeriod", "credit_amount", "set", Effort("rel_sq"), g["AdjustLoanPeriod"],
                         (1, 99_999), consequences=(Consequence("duration", "scale", 1.0),),
                         pre=(Condition("credit_amount", ">", 1000),), post=duration_post + credit_post,
                         description="change the amount, the duration follows (same amount per month)"),
        SequentialAction("GetGuarantor", "other_debtors=guarantor", "assign", Effort("const", 5.0),
                         pre=(Condition("other_debtors=guarantor", "==", 0),), description="find a guarantor"),
        SequentialAction("GetUnskilledJob", "job", "assign", Effort("const", 5.0), assign_value=1.0,
                         pre=(Condition("job", "==", 0),),
                         description="unemployed / non-resident: take an unskilled resident job"),
    ]
