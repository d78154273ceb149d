import numpy as np
import pytest

from envs.capability import CapabilityWorld
from envs.classifiers import SklearnClassifier, ThresholdClassifier
from envs.costs import ConsequenceGraph, Edge
from envs.schema import Feature, FeatureSchema
from envs.world import Action, RecourseWorld

JOB, EDU, LOC = 0, 1, 2  # Job: 0 Seller, 1 Developer; Edu: 0 HS, 1 BSc; Loc: 0 Germany, 1 US


def fig2_world() -> RecourseWorld:
    """CSCF Fig. 2: three single-feature actions and the tau functions of the caption."""
    schema = FeatureSchema((Feature("job", "categorical", 0, 1, categories=("Seller", "Developer")),
                            Feature("edu", "ordinal", 0, 1, "increase", categories=("HS", "BSc")),
                            Feature("loc", "categorical", 0, 1, categories=("Germany", "US"))))
    graph = ConsequenceGraph(3, [
        Edge(LOC, EDU, lambda X: np.where(X[:, LOC] == 1, 1.0, 0.5)),  # tau_32
        Edge(LOC, JOB, lambda X: np.where(X[:, LOC] == 1, 0.5, 1.0)),  # tau_31
        Edge(EDU, JOB, lambda X: np.where(X[:, EDU] >= 1, 0.5, 1.0)),  # tau_21
    ])
    effort = lambda b: (lambda x0, x1: b)  # noqa: E731
    actions = [Action("a1_become_developer", "job", values=(1,), discrete=True, effort=effort(10)),
               Action("a2_get_bsc", "edu", values=(1,), discrete=True, effort=effort(5)),
               Action("a3_move_to_us", "loc", values=(1,), discrete=True, effort=effort(15))]

    class AllThree:
        def predict_proba(self, X):
            return np.all(np.atleast_2d(X) == 1, axis=1).astype(float)

    return RecourseWorld(schema, actions, AllThree(), graph)


def test_cscf_figure2_costs():
    world = fig2_world()
    x0 = np.array([0.0, 0.0, 0.0])
    s1 = world.evaluate(x0, [("a3_move_to_us", 1), ("a1_become_developer", 1), ("a2_get_bsc", 1)])
    s2 = world.evaluate(x0, [("a2_get_bsc", 1), ("a3_move_to_us", 1), ("a1_become_developer", 1)])
    assert s1.cost == pytest.approx(27.5) and s2.cost == pytest.approx(22.5)
    assert s1.valid and s2.valid


def test_without_graph_cost_is_effort():
    world = fig2_world()
    world.graph = None
    r = world.evaluate(np.zeros(3), [("a2_get_bsc", 1), ("a3_move_to_us", 1), ("a1_become_developer", 1)])
    assert r.cost == pytest.approx(30.0)


def test_world_rejects_bad_values_and_actions():
    world = fig2_world()
    with pytest.raises(ValueError, match="a2_get_bsc"):
        world.evaluate(np.zeros(3), [("a2_get_bsc", 7)])
    with pytest.raises(ValueError, match="unknown action"):
        world.evaluate(np.zeros(3), [("fly", 1)])
    with pytest.raises(ValueError, match="expected 3 features"):
        world.evaluate(np.zeros(4), [])


def test_schema_validation_messages():
    schema = FeatureSchema((Feature("age", "numeric", 17, 90, "increase"), Feature("sex", "binary", 0, 1, "immutable")))
    with pytest.raises(ValueError, match="NaN"):
        schema.validate([[np.nan, 0]])
    with pytest.raises(ValueError, match="'age'.*outside"):
        schema.validate([[10, 0]])
    with pytest.raises(ValueError, match="integer code"):
        schema.validate([[30, 0.5]])
    assert schema.mutability_violations(np.array([30, 0]), np.array([29, 0]))[0]
    assert schema.mutability_violations(np.array([30, 0]), np.array([31, 1]))[0]
    assert not schema.mutability_violations(np.array([30, 0]), np.array([31, 0]))[0]
    with pytest.raises(ValueError, match="duplicate"):
        FeatureSchema((Feature("a"), Feature("a")))


def test_capability_world_discounts_make_order_matter():
    acts = np.array([[1, 0, 0], [0, 1, 0]], dtype=np.uint8)
    world = CapabilityWorld(acts, np.array([10.0, 10.0]), np.array([1, 1, 0]), discount_edges=[(0, 1, 0.5)])
    x = np.zeros(3, dtype=np.uint8)
    assert world.evaluate(x, [0, 1]).cost == pytest.approx(15.0)  # holding 0 halves the action on 1
    assert world.evaluate(x, [1, 0]).cost == pytest.approx(20.0)
    assert world.order_matters


def test_capability_world_validation():
    acts = np.array([[1, 0], [0, 1]], dtype=np.uint8)
    with pytest.raises(ValueError, match="costs"):
        CapabilityWorld(acts, np.array([1.0, 0.0]), np.ones(2))
    with pytest.raises(ValueError, match="thresholds"):
        CapabilityWorld(acts, np.ones(2), np.ones(3))
    world = CapabilityWorld(acts, np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="expected 2 features"):
        world.validate_agents([[0, 1, 1]])
    with pytest.raises(ValueError, match="0 or 1"):
        world.validate_agents([[0, 2]])
    with pytest.raises(ValueError, match="NaN"):
        world.validate_agents([[0, np.nan]])
    assert CapabilityWorld.from_dict(world.to_dict()).fingerprint() == world.fingerprint()


def test_rollout_flags_repeats_and_disallowed():
    acts = np.array([[1, 0], [0, 1]], dtype=np.uint8)
    world = CapabilityWorld(acts, np.ones(2), np.ones(2), access=np.array([[1, 0], [1, 1]]))
    _, cost, ok = world.rollout(np.zeros((3, 2)), np.array([[0, 1], [0, 0], [0, 1]]), np.array([0, 1, 1]))
    assert ok.tolist() == [False, False, True]
    assert cost.tolist() == [2.0, 2.0, 2.0]


def test_classifier_adapters():
    t = ThresholdClassifier(np.array([[1, 0], [0, 1]]))
    assert t.predict_proba(np.array([[1, 0], [1, 0]]), groups=np.array([0, 1])).tolist() == [1.0, 0.0]
    from sklearn.linear_model import LogisticRegression

    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    clf = SklearnClassifier(LogisticRegression().fit(X, [0, 0, 1, 1]))
    p = clf.predict_proba(X)
    assert p.shape == (4,) and p[0] < 0.5 < p[3]
    with pytest.raises(ValueError, match="positive_class"):
        SklearnClassifier(LogisticRegression().fit(X, [0, 0, 1, 1]), positive_class=7)
