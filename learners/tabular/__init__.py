"""Amortized counterfactual generators for the tabular worlds, trained on MACE's labels.

A generator answers a batch of rejected agents (encoded rows) with counterfactuals in one pass:

1. ``candidates(world, X)`` proposes K encoded rows per agent (the method's own idea);
2. every candidate is *projected* onto what the agent may reach (schema bounds, immutable and
   increase-/decrease-only features, integer codes rounded away from the agent, one valid 1 per
   one-hot group) and the whole (N, K) batch is checked with the model in one call;
3. the nearest accepted candidate (MACE's normalized distance, Eq. 3) is *polished*: its numeric
   changes shrink toward the agent by bisection while the model still accepts (a few batched
   calls), then each changed feature is tried back at the agent's value (one batched call).

Every point returned was itself accepted by a model call and lies in the agent's reachable box
(no value is recomputed after its check: ``x + (c - x)`` can miss ``c``'s last bit); an agent
none of whose candidates is accepted gets a NaN row (the server then falls back to a solver).
The polish only shortens the answer; it is a heuristic, and the answers carry no certificate.

Methods (``TABULAR_GENERATORS``), one module each:

- ``nearest_cfe``: no learning, the baseline. The k nearest training agents (Euclidean on the
  schema-scaled rows) lend their MACE counterfactual: the features they changed take the
  neighbour's new values (absolute) or the neighbour's change added to the agent (relative).
- ``named_cfe``: a named-CFE classifier (learners.named_cfe, the learning-CFE paper's MC model)
  over the set of raw features MACE changed; for each of its top classes, the nearest training
  agent with that class lends its values as above.
- ``proposer``: K proposals per agent from one forward pass (imitation of MACE, then improvement on
  the model's own reward), searched within a query budget through ``predict_proba`` only (issue 56).

Persistence follows learners/base.py: ``config.json`` + ``arrays.npz`` (+ the classifier's
``weights.pt``), never a pickle.

A world with rules (``envs.rules``, issue 55) is searched within them: ``rules`` narrows every agent's
box by the one-column rules and runs the shared checker on every candidate a search accepts, and
distances take the rules' cost weights (``WorldGeometry.gate``); no answer breaks a rule.

Modules: ``geometry`` (projection, distance, acceptance), ``rules`` (the world's rules, vectorized),
``polish``, ``base`` (the shared recommend and persistence), one module per method (``nearest``,
``named_cfe``, ``change_value``).
"""

from __future__ import annotations

from typing import Any

from learners.tabular.base import Recommendations, TabularGenerator, TabularLabels
from learners.tabular.change_value import ChangeValueGenerator
from learners.tabular.geometry import WorldGeometry, accepted_distances, accepts
from learners.tabular.named_cfe import NamedCfeTabularGenerator
from learners.tabular.nearest import NearestCfeGenerator
from learners.tabular.polish import cell_clip, polish, split_edges, trade_sweep
from learners.tabular.proposer import ProposerGenerator

TABULAR_GENERATORS: dict[str, type[TabularGenerator]] = {
    g.method: g for g in (NearestCfeGenerator, NamedCfeTabularGenerator, ChangeValueGenerator, ProposerGenerator)}


def build_tabular_generator(method: str, params: dict[str, Any] | None = None) -> TabularGenerator:
    """A tabular generator by its method name, its hyperparameters checked."""
    if method not in TABULAR_GENERATORS:
        raise ValueError(f"method: unknown tabular generator {method!r}; known: {sorted(TABULAR_GENERATORS)}")
    return TABULAR_GENERATORS[method](**(params or {}))


__all__ = ["TABULAR_GENERATORS", "ChangeValueGenerator", "NamedCfeTabularGenerator", "NearestCfeGenerator", "ProposerGenerator",
           "Recommendations", "TabularGenerator", "TabularLabels", "WorldGeometry", "accepted_distances", "accepts",
           "build_tabular_generator", "cell_clip", "polish", "split_edges", "trade_sweep"]
