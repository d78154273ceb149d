"""The proposer's setting for a model you can only call, chosen from the model's own answers (issue 56).

Which learned parts answer best under a query budget depends on the model (docs/generators.md, *Which
setting, for which model*): a stand-in of its score (``surrogate``) where it is smooth, a student of its
corners where it answers in steps, that student's picks in both rounds and self-labels where there are
many unlabelled rejected rows (Adult and Credit forest; there at a threshold of 0.2, which answers Credit as its
tuned 0.1 does and Adult as the default 0.3 does), its picks in round two only where there are few
(German forest: 160 rejected training rows). A user holding a model behind a scoring API does not know
which it is; ``ProposerParams(setting="auto")`` lets the fit tell, from the step probe it already makes
(``steps.step_share``: one call of 256 rows), and from how many unlabelled rows the labels bring.

``choose_setting`` is the rule, kept apart from the fit so that it can be read and tested on its own.
The options it sets are ``AUTO_FIELDS``; amounts the user gave (``student_agents``, ``self_labels``
above zero) are kept, zero takes the table's amount. Every other option is the user's. The fit writes the chosen
options into the generator's ``params`` (``fit_info_["setting"]`` says which and why), so that a saved fit answers
with them; a second fit chooses again from the same rule.
"""

from __future__ import annotations

from typing import Any

SETTINGS = ("manual", "auto")
AUTO_FIELDS = ("surrogate", "surrogate_members", "student_agents", "student_use", "student_pool", "student_threshold", "self_labels")
STUDENT_AGENTS = 10_000  # drawn agents for the student (2,000,000 rows at 200 corners each), as in the table
SELF_LABELS = 1_500  # unlabelled rejected rows answered at fit time, as in the table
MANY_UNLABELLED = 1_000  # at least this many unlabelled rows: the student in both rounds and self-labels
FEW_ROWS_POOL = 1_000  # the student's pool with few rows to learn from (German forest's setting)
BOTH_THRESHOLD = 0.2  # the student's threshold in both rounds: Credit forest's held-out .91 at 0.3, .95 at 0.2 (Adult: .96 at both)
THRESHOLD = 0.3  # the student's default threshold, elsewhere
SURROGATE_MEMBERS = 3  # surrogates averaged: one is a draw (Credit MLP's one surrogate .86 on a fit where three answer .92)


def choose_setting(*, steps: bool, unlabelled: int, student_agents: int = 0, self_labels: int = 0,
                   surrogate_members: int = 1) -> tuple[dict[str, Any], str]:
    """The options for a model in steps (``steps``) or not, with ``unlabelled`` rejected rows MACE did not
    label; ``student_agents`` / ``self_labels``: the user's amounts (0: the table's); ``surrogate_members``: the
    user's, where more than the table's 3. Returns the options
    (``AUTO_FIELDS``) and one sentence saying why."""
    if unlabelled < 0:
        raise ValueError(f"unlabelled: a count of rows, got {unlabelled!r}")
    if not steps:
        members = max(int(surrogate_members), SURROGATE_MEMBERS)
        return ({"surrogate": True, "surrogate_members": members, "student_agents": 0, "student_use": "round_one",
                 "student_pool": 10_000,
                 "student_threshold": THRESHOLD, "self_labels": 0},
                "the model's probability moves with every small change (smooth): surrogates of its score "
                "averaged, used where their held-out error near the boundary is small")
    agents = int(student_agents) or STUDENT_AGENTS
    if unlabelled >= MANY_UNLABELLED:
        n = min(int(self_labels) or SELF_LABELS, int(unlabelled))
        return ({"surrogate": False, "surrogate_members": 1, "student_agents": agents, "student_use": "both",
                 "student_pool": 10_000,
                 "student_threshold": BOTH_THRESHOLD, "self_labels": n},
                f"the model answers in steps (a tree ensemble) and {unlabelled} unlabelled rejected rows are "
                f"at hand: a student of its corners in both rounds and {n} self-labels")
    return ({"surrogate": False, "surrogate_members": 1, "student_agents": agents, "student_use": "round_two",
             "student_pool": FEW_ROWS_POOL, "student_threshold": THRESHOLD, "self_labels": 0},
            f"the model answers in steps (a tree ensemble) with {unlabelled} unlabelled rejected rows "
            f"(fewer than {MANY_UNLABELLED}): a student of its corners in round two, no self-labels")
