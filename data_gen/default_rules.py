"""The bundled data sets' default rules and how their features read to a person (issue 55).

``DEFAULT_RULES`` holds, per bundled data set, the rule set (``envs.rules``) its spec carries by
default: for Adult, GeCo's Appendix A.1 program (Fig. 8) as PLAF statements, with the language's
other kinds beside it (a link: a level of education costs a year of age; step bounds; forbidden
transitions; cost weights per direction); for German the same kinds (the paper has no German
program). These are the rules ``benchmarks/mace.py --rules`` measures MACE under, and the ones a
bundled Adult or German run trained from now on carries (``tabular.rules: default``, the default of
a tabular config; ``evaluation.tabular_experiment``). Compas and Credit have none.

``FEATURE_TEXT`` gives each bundled feature's display name, unit and, for a feature only time moves
(age: increase-only, and nobody can make it rise faster), ``time``: the unit it passes in, so the
page says "in 4 years" instead of "raise the age from 24 to 28". ``spec_from_dataset`` puts both in
the bundled specs (``data_gen.spec``).

``rules_for(setting, dataset=..., spec_rules=...)`` resolves a config's ``rules`` setting:
``default`` (the data set's defaults; for a user's table, its spec's rules), ``none``, or a path to a
YAML/JSON file with the rules (a ``rules:`` mapping, or the mapping itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.rules import RuleSet

DEFAULT_RULES: dict[str, dict[str, Any]] = {
    # GeCo Appendix A.1 (Fig. 8), Adult, as PLAF statements; then the language's other kinds.
    "adult": {
        "plaf": ["PLAF x_cf.age >= x.age", "PLAF x_cf.education-num >= x.education-num",
                 "PLAF x_cf.marital-status = x.marital-status", "PLAF x_cf.relationship = x.relationship",
                 "PLAF x_cf.sex = x.sex", "PLAF x_cf.native-country = x.native-country",
                 "PLAF IF x_cf.education-num > x.education-num THEN x_cf.age >= x.age + 4"],
        "links": [{"from": "education-num", "to": "age", "per_unit": 1}],  # a year of education, a year of age
        "education-num": {"max_levels_up": 4},
        "hours-per-week": {"max_increase": 20, "max_decrease": 20},
        "occupation": {"forbid": [["Handlers-cleaners", "Exec-managerial"], ["Other-service", "Exec-managerial"],
                                  ["Priv-house-serv", "Exec-managerial"], ["Farming-fishing", "Prof-specialty"]]},
        "workclass": {"forbid": [["Private", "Without-pay"], ["Private", "Federal-gov"]]},
        "weights": {"hours-per-week": {"up": 2.0, "down": 0.5}, "capital-gain": {"up": 1.5, "down": 1.0}},
    },
    # The same kinds for German: monotone age and employment, the immutable ones, employment => age.
    "german": {
        "plaf": ["PLAF x_cf.age >= x.age", "PLAF x_cf.employment >= x.employment",
                 "PLAF x_cf.personal_status_sex = x.personal_status_sex",
                 "PLAF x_cf.foreign_worker = x.foreign_worker", "PLAF x_cf.credit_history = x.credit_history",
                 "PLAF IF x_cf.employment > x.employment THEN x_cf.age >= x.age + 1"],
        "links": [{"from": "employment", "to": "age", "per_unit": 2}],  # a level of employment length, two years
        "duration": {"max_increase": 24, "max_decrease": 12},
        "credit_amount": {"max_decrease": 5000},
        "job": {"max_levels_up": 1, "forbid": [["skilled employee", "unskilled resident"]]},
        "savings_status": {"forbid": [["<100 DM", ">=1000 DM"], ["100-500 DM", ">=1000 DM"]]},
        "housing": {"forbid": [["rent", "own"]]},
        "weights": {"credit_amount": {"up": 0.5, "down": 2.0}, "duration": {"up": 1.0, "down": 1.5}},
    },
}

# feature -> (display name, unit, time): time is the unit in which only time moves the feature
FEATURE_TEXT: dict[str, dict[str, tuple[str, str, str]]] = {
    "adult": {
        "age": ("age", "years", "years"), "workclass": ("work class", "", ""),
        "education-num": ("education", "", ""), "marital-status": ("marital status", "", ""),
        "capital-gain": ("capital gain", "USD", ""), "capital-loss": ("capital loss", "USD", ""),
        "hours-per-week": ("hours per week", "hours", ""), "native-country": ("native country", "", ""),
    },
    "german": {
        "checking_status": ("checking account", "", ""), "duration": ("loan duration", "months", ""),
        "credit_history": ("credit history", "", ""), "credit_amount": ("credit amount", "DM", ""),
        "savings_status": ("savings", "", ""), "employment": ("employment length", "", ""),
        "installment_rate": ("instalment rate", "% of income", ""),
        "personal_status_sex": ("personal status and sex", "", ""), "age": ("age", "years", "years"),
        "existing_credits": ("existing credits", "", ""), "foreign_worker": ("foreign worker", "", ""),
    },
    "german_full": {"age": ("age", "years", "years"), "duration": ("loan duration", "months", ""),
                    "credit_amount": ("credit amount", "DM", "")},
}
SETTINGS = ("default", "none")


def default_rules(dataset: str) -> RuleSet:
    """The rules a bundled data set's spec carries by default (empty for those without)."""
    return RuleSet.from_dict(DEFAULT_RULES.get(dataset))


def read_rules_file(path: str | Path) -> RuleSet:
    """Rules from a YAML or JSON file: a ``rules:`` mapping (a spec's section), or the mapping itself."""
    import yaml

    p = Path(path)
    if not p.exists():
        raise ValueError(f"rules: no file {str(p)!r} (give default, none, or a YAML/JSON file of rules)")
    d = yaml.safe_load(p.read_text()) or {}
    if isinstance(d, dict) and set(d) == {"rules"}:
        d = d["rules"]
    return RuleSet.from_dict(d)


def rules_for(setting: str, *, dataset: str | None = None, spec_rules: RuleSet | None = None) -> RuleSet | None:
    """The rules a run's world carries for a config's ``rules`` setting: ``default`` (the bundled data
    set's defaults, or the user's spec's rules), ``none``, or a file; None where there are none."""
    if setting == "none":
        return None
    if setting == "default":
        rules = spec_rules if spec_rules is not None else default_rules(dataset) if dataset else RuleSet()
    else:
        rules = read_rules_file(setting)
    return rules or None
