"""RL policies on the recourse MDP family: a policy is a generator (a greedy deterministic rollout).

One module per family on a shared base, as stable-baselines3 lays out its algorithms:

- :mod:`~learners.policies.base`: hyperparameters, batched greedy rollout, held-out model
  selection, serving and persistence (state_dict + JSON), the sb3 training loop;
- :mod:`~learners.policies.networks`: observation features, policy heads, the sb3 policy that
  uses them and the serving network rebuilt without sb3;
- :mod:`~learners.policies.ppo`: ``maskable_ppo``, and its behaviour-cloning presets ``bc`` and
  ``bc_ppo``;
- :mod:`~learners.policies.bc`: behaviour cloning from exact labels (the presets' algorithm);
- :mod:`~learners.policies.dqn`: ``dqn``;
- :mod:`~learners.policies.lookahead`: ``lookahead``, the no-learning greedy two-step baseline;
- :mod:`~learners.policies.sequential`: the policies of the sequential CSCF worlds
  (``recourse/Sequential-v0``): ``seq_maskable_ppo``, ``seq_bc``, ``seq_bc_ppo``, ``seq_lookahead``;
- :mod:`~learners.policies.sequential_seq2seq`: ``seq_encoder_decoder``, the full-action
  encoder-decoder on the sequencer's sequences;
- :mod:`~learners.policies.sequential_search`: the verified beam search every sequential policy
  can answer with (``beam_width``).

Importing the package registers every method with :func:`learners.base.register`.
"""

from learners.policies.base import (
    ENV_ID,
    PolicyGenerator,
    PolicyParams,
    PolicyRollout,
    RolloutParams,
    SB3PolicyGenerator,
    greedy_rollout,
)
from learners.policies.bc import behaviour_clone, expert_pairs, expert_sequences, optimal_first_actions
from learners.policies.dqn import DQNParams, DQNPolicy
from learners.policies.lookahead import LookaheadParams, LookaheadPolicy
from learners.policies.networks import (
    CapabilityFeatures,
    LookaheadScorer,
    PerActionScorer,
    build_net,
    export_net,
)
from learners.policies.ppo import (
    BCParams,
    BCPolicy,
    BCPPOParams,
    BCPPOPolicy,
    MaskablePPOParams,
    MaskablePPOPolicy,
)
from learners.policies.sequential import SequentialBC, SequentialBCPPO, SequentialLookahead, SequentialPPO
from learners.policies.sequential_params import SequentialPolicyParams
from learners.policies.sequential_rollout import SequencePrediction
from learners.policies.sequential_seq2seq import SequentialEncoderDecoder, SequentialSeq2SeqParams

__all__ = [
    "ENV_ID", "BCParams", "BCPolicy", "BCPPOParams", "BCPPOPolicy", "CapabilityFeatures", "DQNParams", "DQNPolicy",
    "LookaheadParams", "LookaheadPolicy", "LookaheadScorer", "MaskablePPOParams", "MaskablePPOPolicy",
    "PerActionScorer", "PolicyGenerator", "SequencePrediction", "SequentialBC", "SequentialBCPPO",
    "SequentialEncoderDecoder", "SequentialLookahead", "SequentialPPO", "SequentialSeq2SeqParams", "SequentialPolicyParams", "PolicyParams", "PolicyRollout", "RolloutParams", "SB3PolicyGenerator",
    "behaviour_clone", "build_net", "expert_pairs", "expert_sequences", "export_net", "greedy_rollout",
    "optimal_first_actions",
]
