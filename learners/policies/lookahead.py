"""The no-learning baseline of the RL policies (``lookahead``): a greedy two-step lookahead.

At each step the rollout takes the action whose completion with at most one more action is
cheapest, priced in order (:class:`~learners.policies.networks.CapabilityFeatures`' lookahead
gap of 0); where no action completes within two steps, the one that provides the largest share
of the deficit. These are the same features the learned policies see, so this is what the input
features alone achieve, and the starting point of the per-action scorer's residual
(``lookahead_prior``). It is a generator like the others (``method: lookahead`` in a config's
``policies:``): ``fit`` learns nothing and only takes the world, ``save`` writes the (empty)
state_dict and the world, and confidence is the softmax of minus the gap in raw cost units.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from data_gen.dataset import Split
from learners.base import FitContext, register
from learners.policies.base import PolicyGenerator, RolloutParams, world_of
from learners.policies.networks import build_net


@dataclass
class LookaheadParams(RolloutParams):
    """The lookahead baseline has only the rollout's settings (``max_steps``, ``num_threads``)."""


@register
class LookaheadPolicy(PolicyGenerator):
    """Greedy two-step lookahead in the world: no weights, no training (see the module doc)."""

    method = "lookahead"
    Params = LookaheadParams
    params: LookaheadParams

    def fit(self, train: Split, val: Split | None, ctx: FitContext) -> LookaheadPolicy:
        """Take the world from ``ctx``; ``train`` and ``val`` are not read (nothing is learned)."""
        t0 = time.perf_counter()
        self.world_ = world_of(ctx, self.method)
        self.reward_scale_ = 1.0  # scores and confidences in raw cost units
        self.net_cfg_ = {"obs_dim": self.world_.n_features + self.world_.n_actions,
                         "n_actions": self.world_.n_actions, "features": "lookahead", "head": "lookahead",
                         "reward_scale": self.reward_scale_, "output": "logits"}
        self.net_ = build_net(self.net_cfg_, self.world_).eval()
        self.fit_info_ = {"fit_seconds": round(time.perf_counter() - t0, 3)}
        return self
