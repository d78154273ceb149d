"""serving/alternatives.py: diverse alternatives, and the nearest verified answer always first."""

from types import SimpleNamespace

import numpy as np

from serving.alternatives import diverse, nearest_first
from serving.tabular import Answer

CODEC = SimpleNamespace(domains=[SimpleNamespace(columns=(0,)), SimpleNamespace(columns=(1,)),
                                 SimpleNamespace(columns=(2, 3))])
X = np.array([0.0, 0.0, 1.0, 0.0])


def test_diverse_keeps_one_candidate_per_set_of_changed_features_nearest_first():
    a = (np.array([1.0, 0.0, 1.0, 0.0]), 0.3, "geco")
    b = (np.array([2.0, 0.0, 1.0, 0.0]), 0.2, "geco")  # changes the same feature as a: one of them
    c = (np.array([0.0, 1.0, 0.0, 1.0]), 0.5, "geco")
    out = diverse(CODEC, X, None, [a, c, b], 3)
    assert [t[1] for t in out] == [0.2, 0.5]
    assert diverse(CODEC, X, b[0], [a, c], 3) == [c]  # the answer's own set is taken


def test_a_nearer_alternative_becomes_the_answer():
    primary = Answer("ok", np.array([0.0, 5.0, 1.0, 0.0]), 0.4, "named_cfe", "generator", None, True)
    near = (np.array([1.0, 0.0, 1.0, 0.0]), 0.1, "geco")
    far = (np.array([0.0, 0.0, 0.0, 1.0]), 0.9, "geco")
    primary.alternatives = [far, near]
    out = nearest_first(CODEC, X, primary, 2)
    assert out.distance == 0.1 and out.method == "geco" and out.kind == "geco" and out.optimal is None
    assert [t[1] for t in out.alternatives] == [0.4, 0.9]  # the former answer is now an alternative
    assert np.array_equal(out.cf, near[0])


def test_the_answer_stays_when_it_is_nearest_or_certified():
    a = Answer("ok", np.array([1.0, 0.0, 1.0, 0.0]), 0.1, "named_cfe", "generator", None, True,
               [(np.array([0.0, 1.0, 1.0, 0.0]), 0.3, "geco")])
    assert nearest_first(CODEC, X, a, 2) is a
    certified = Answer("ok", np.array([1.0, 0.0, 1.0, 0.0]), 0.2, "mace", "mace", True, True,
                       [(np.array([0.0, 1.0, 1.0, 0.0]), 0.2 - 1e-15, "mace")])
    assert nearest_first(CODEC, X, certified, 2) is certified
