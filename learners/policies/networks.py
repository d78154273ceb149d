"""The networks of the RL policies: observation features with the world's structure, the policy
heads, the sb3 policy that uses them, and the plain serving network rebuilt without sb3.

**Features.** SetCoverEnv's observation ``(x, used)`` passes through :class:`CapabilityFeatures`
(``features``): per action, the share of the deficit it provides, whether it provides all, its
step cost at the current state, and (``"lookahead"``, default) the cheapest completion with at
most one more action, priced in order. These features have no weights; they are computed from
the world (saved with the policy). ``features="raw"`` passes the observation through unchanged.

**Heads.** :class:`PerActionScorer` (``head="per_action"``, default): one small MLP shared by
all actions scores each action from its features, a learned action embedding and the agent
context; with lookahead features its logits are a residual on the greedy two-step lookahead
(``lookahead_prior``): training starts from that heuristic, and the held-out selection keeps it
when learning does not beat it. ``head="mlp"``: a plain MLP over all features (DQN's Q-network).
On the 20-feature benchmark a plain MLP on the raw observation (``features="raw", head="mlp"``)
clones the exact labels far worse (about 75% optimal after 80 BC epochs, against 98-99% for the
default): the shared scorer compares actions by their features instead of memorising one output
unit per action. :class:`LookaheadScorer` (``head="lookahead"``) has no weights at all: the
no-learning baseline of :mod:`learners.policies.lookahead`.

**Serving.** :func:`build_net` rebuilds ``Sequential(features, head)`` from a JSON config and
the world; :func:`export_net` copies an sb3 model's action path into it, so that a saved policy
is a ``state_dict`` served without sb3.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from envs.capability import CapabilityWorld

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}
MASKED_LOGIT = -1e8  # logit of a masked action (as sb3-contrib's MaskableCategorical)


class CapabilityFeatures(nn.Module):
    """Observation features that give the policy the world's structure (no learned weights).

    From SetCoverEnv's observation ``(x, used)`` it computes, for every action ``a``: the share
    of the agent's deficit it provides, whether it provides all of it, and its step cost
    ``c_a(x) = b_a * g_a(x) / reward_scale`` (the consequence graph of the capability world is
    linear in ``x``: ``tau_kh = 1 - (1 - f_kh) x_k``, averaged as CSCF Eq. 1 and 2). With
    ``lookahead`` also a two-step completion: whether ``a`` followed by at most one more action
    gets the agent accepted, the cheapest such cost ``c_a(x) + min_b c_b(x | a)`` priced in
    order, and its gap to the cheapest over all actions (0 where no completion exists).
    Output ``[x, used, share, full, cost (, done2, cost2, gap2)]``, each block ``A`` wide.
    Thresholds of a world with several hidden groups are averaged and every action is
    considered (the group is not observed). Also an sb3 features extractor: it takes the
    observation space first and exposes ``features_dim``.
    """

    _CHUNK = 512  # rows per lookahead block (memory: CHUNK x A x A floats)

    def __init__(self, observation_space: Any = None, world: dict[str, Any] | None = None,
                 reward_scale: float = 1.0, lookahead: bool = False):
        super().__init__()
        if world is None:
            raise ValueError("world: CapabilityFeatures needs the world (world.to_dict())")
        w = CapabilityWorld.from_dict(world)
        n, A = w.n_features, w.n_actions
        # step costs c(x) = b * (1 - x @ M): exact for the capability graph (binary tau).
        M = np.zeros((n, A))
        if w.discount_edges:
            indeg = np.bincount([int(h) for _, h, _ in w.discount_edges], minlength=n).astype(float)
            W = np.zeros((n, n))
            for k, h, f in w.discount_edges:
                W[int(k), int(h)] += (1.0 - float(f)) / indeg[int(h)]
            influenced = w.actions & (indeg > 0)
            counts = influenced.sum(1)
            avg = np.where(counts[:, None] > 0, influenced / np.maximum(counts, 1)[:, None], 0.0)  # (A, n)
            M = W @ avg.T
        self.n_features, self.n_actions, self.lookahead = n, A, bool(lookahead)
        self.discounted = bool(w.discount_edges)
        self.features_dim = n + A * (7 if lookahead else 4)
        t = torch.as_tensor(w.classifier.thresholds, dtype=torch.float32).mean(0)
        self.register_buffer("need", t, persistent=False)
        self.register_buffer("acts", torch.as_tensor(w.actions, dtype=torch.float32), persistent=False)
        self.register_buffer("b", torch.as_tensor(w.costs / reward_scale, dtype=torch.float32), persistent=False)
        self.register_buffer("m", torch.as_tensor(M * w.costs / reward_scale, dtype=torch.float32), persistent=False)

    def _two_step(self, x: torch.Tensor, deficit: torch.Tensor, cost: torch.Tensor, full: torch.Tensor
                  ) -> torch.Tensor:
        # uncovered[r, a, b]: needed capabilities still missing after a then b
        rest = deficit[:, None, :] * (1.0 - self.acts)[None]  # (R, A, n)
        uncovered = rest @ (1.0 - self.acts).T  # (R, A, A)
        if self.discounted:  # c_b(x | a) = b - (x + a (1 - x)) @ m, (R, A, A)
            gained = self.acts[None] * (1.0 - x[:, None, :])
            second = (self.b - x @ self.m)[:, None, :] - gained @ self.m
        else:
            second = self.b.expand(len(x), self.n_actions, self.n_actions)
        second = torch.where(uncovered < 0.5, second, torch.tensor(torch.inf))
        best = cost + torch.where(full > 0.5, torch.zeros_like(cost), second.min(2).values)
        done = torch.isfinite(best)
        gap = best - best.min(1, keepdim=True).values
        zero = torch.zeros_like(best)
        return torch.cat([done.float(), torch.where(done, best, zero), torch.where(done, gap, zero)], 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs[:, : self.n_features]
        deficit = self.need * (1.0 - x)
        size = deficit.sum(1, keepdim=True)
        cover = deficit @ self.acts.T
        share = cover / size.clamp(min=1e-6)
        full = (cover >= size - 1e-6).float()
        cost = self.b - x @ self.m
        parts = [obs, share, full, cost]
        if self.lookahead:
            parts.append(torch.cat([self._two_step(x[i : i + self._CHUNK], deficit[i : i + self._CHUNK],
                                                   cost[i : i + self._CHUNK], full[i : i + self._CHUNK])
                                    for i in range(0, len(x), self._CHUNK)]))
        return torch.cat(parts, 1)


def mlp(n_in: int, widths: tuple[int, ...] | list[int], n_out: int | None, activation: str) -> nn.Sequential:
    """Linear -> activation per hidden width (sb3's layout), then a linear output when ``n_out``."""
    layers: list[nn.Module] = []
    for width in widths:
        layers += [nn.Linear(n_in, int(width)), ACTIVATIONS[activation]()]
        n_in = int(width)
    if n_out is not None:
        layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)


class PerActionScorer(nn.Module):
    """Policy head that scores every action with one shared MLP (weights shared across actions).

    Input: :class:`CapabilityFeatures` output ``[x, then C blocks A wide]``. The token of action
    ``a`` is its ``C`` channels, a learned embedding of ``a`` (id-specific preferences), and the
    agent context (``x`` and the mean and min of every channel over actions). Output: ``(B, A)``
    logits. Sharing the scorer across actions is the inductive bias that lets a policy learned
    from ~10^4 agents compare actions by their features rather than memorize 100 output units.

    With the lookahead channels (``C = 7``) and ``prior`` the logits are a residual on a prior: the MLP's
    output minus ``k * gap2`` (``k`` learned, starting at ``PRIOR_SCALE``; an action with no
    two-step completion counts a gap of one mean action effort). With the MLP's last layer
    initialised near zero, training starts from the greedy two-step lookahead and learns where
    and how to depart from it (residual policy learning).
    """

    PRIOR_SCALE = 50.0  # initial k: a gap of 2% of a mean effort is a logit difference of 1
    _DONE2, _GAP2 = 4, 6  # lookahead channels (CapabilityFeatures order)

    def __init__(self, n_features: int, n_actions: int, channels: int, widths: tuple[int, ...] | list[int],
                 activation: str, embedding: int = 16, prior: bool = True):
        super().__init__()
        self.n_features, self.n_actions, self.channels = n_features, n_actions, channels
        self.embedding = nn.Parameter(0.1 * torch.randn(n_actions, embedding))
        self.mlp = mlp(channels + embedding + n_features + 2 * channels, widths, 1, activation)
        self.prior_log_scale = (nn.Parameter(torch.tensor(float(np.log(self.PRIOR_SCALE))))
                                if prior and channels == 7 else None)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        B, n, A, C = len(f), self.n_features, self.n_actions, self.channels
        tok = f[:, n:].reshape(B, C, A).transpose(1, 2)  # (B, A, C)
        ctx = torch.cat([f[:, :n], tok.mean(1), tok.min(1).values], 1)
        # The first layer on [token, embedding, context], computed by blocks: the embedding part
        # once per action and the context part once per agent (same result, far fewer flops).
        first = self.mlp[0]
        w_tok, w_emb, w_ctx = first.weight.split([C, self.embedding.shape[1], ctx.shape[1]], dim=1)
        h = tok @ w_tok.T + (self.embedding @ w_emb.T)[None] + (ctx @ w_ctx.T + first.bias)[:, None]
        out = self.mlp[1:](h).squeeze(2)
        if self.prior_log_scale is None:
            return out
        gap = torch.where(tok[..., self._DONE2] > 0.5, tok[..., self._GAP2], torch.ones_like(out))
        return out - self.prior_log_scale.exp() * gap


class ActionScorerExtractor(nn.Module):
    """sb3 ``mlp_extractor`` of :class:`ActionScoringPolicy`: the actor is a
    :class:`PerActionScorer` (its latent *is* the logits), the critic an MLP on the features."""

    def __init__(self, features: CapabilityFeatures, pi: list[int], vf: list[int], activation: str,
                 prior: bool = True):
        super().__init__()
        channels = (features.features_dim - features.n_features) // features.n_actions
        self.actor = PerActionScorer(features.n_features, features.n_actions, channels, pi, activation,
                                     prior=prior)
        self.critic = mlp(features.features_dim, vf, None, activation)
        self.latent_dim_pi = features.n_actions
        self.latent_dim_vf = vf[-1] if vf else features.features_dim

    def forward(self, f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor(f), self.critic(f)

    def forward_actor(self, f: torch.Tensor) -> torch.Tensor:
        return self.actor(f)

    def forward_critic(self, f: torch.Tensor) -> torch.Tensor:
        return self.critic(f)


class ActionScoringPolicy(MaskableActorCriticPolicy):
    """MaskablePPO policy whose actor is a :class:`PerActionScorer` (needs CapabilityFeatures)."""

    def __init__(self, *args: Any, lookahead_prior: bool = True, **kwargs: Any):
        self.lookahead_prior = lookahead_prior  # read by _build_mlp_extractor during __init__
        super().__init__(*args, **kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "lookahead_prior": self.lookahead_prior}

    def _build_mlp_extractor(self) -> None:
        if not isinstance(self.features_extractor, CapabilityFeatures):
            raise ValueError("head: 'per_action' needs features 'capability' or 'lookahead'")
        arch = self.net_arch if isinstance(self.net_arch, dict) else {"pi": self.net_arch, "vf": self.net_arch}
        act = next(k for k, v in ACTIVATIONS.items() if v is self.activation_fn)
        self.mlp_extractor = ActionScorerExtractor(self.features_extractor, list(arch["pi"]), list(arch["vf"]), act,
                                                   prior=self.lookahead_prior)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()  # the scorer's output is already one logit per action
        last = self.mlp_extractor.actor.mlp[-1]
        nn.init.orthogonal_(last.weight, gain=0.01)  # small initial logits, as sb3's action_net
        nn.init.zeros_(last.bias)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)


class LookaheadScorer(nn.Module):
    """No-learning head on :class:`CapabilityFeatures` with lookahead: the action whose two-step
    completion is cheapest scores highest (minus its gap to the cheapest); an action with no
    two-step completion scores -1e6 plus the share of the deficit it provides, so that the
    rollout takes the largest share when no action completes within two steps."""

    NO_COMPLETION = -1e6  # below any gap: completing actions always win

    def __init__(self, n_features: int, n_actions: int):
        super().__init__()
        self.n_features, self.n_actions = n_features, n_actions

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        n, A = self.n_features, self.n_actions
        share, done, gap = f[:, n + A : n + 2 * A], f[:, n + 4 * A : n + 5 * A], f[:, n + 6 * A : n + 7 * A]
        return torch.where(done > 0.5, -gap, self.NO_COMPLETION + share)


def build_net(cfg: dict[str, Any], world: CapabilityWorld) -> nn.Sequential:
    """The serving network ``Sequential(features, head)``: features ``cfg["features"]`` ("raw"
    observation, or :class:`CapabilityFeatures` "capability"/"lookahead"), head ``cfg["head"]``
    ("mlp": Linear -> activation per hidden width, then a linear layer with one score per
    action; "per_action": :class:`PerActionScorer`; "lookahead": :class:`LookaheadScorer`, no
    weights). Scores are logits (Q-values for DQN)."""
    if cfg["features"] in ("capability", "lookahead"):
        features: nn.Module = CapabilityFeatures(None, world.to_dict(), cfg["reward_scale"],
                                                 cfg["features"] == "lookahead")
        n_in = features.features_dim
    elif cfg["features"] == "raw":
        features, n_in = nn.Flatten(), cfg["obs_dim"]
    else:
        raise ValueError(f"features: expected 'raw', 'capability' or 'lookahead', got {cfg['features']!r}")
    if cfg["head"] == "per_action":
        if not isinstance(features, CapabilityFeatures):
            raise ValueError("head: 'per_action' needs features 'capability' or 'lookahead'")
        channels = (n_in - features.n_features) // features.n_actions
        head: nn.Module = PerActionScorer(features.n_features, features.n_actions, channels, cfg["net_arch"],
                                          cfg["activation"], prior=cfg.get("lookahead_prior", True))
    elif cfg["head"] == "lookahead":
        if not (isinstance(features, CapabilityFeatures) and features.lookahead):
            raise ValueError("head: 'lookahead' needs features 'lookahead'")
        head = LookaheadScorer(features.n_features, features.n_actions)
    else:
        head = mlp(n_in, cfg["net_arch"], cfg["n_actions"], cfg["activation"])
    return nn.Sequential(features, head)


def export_net(model: Any, net_cfg: dict[str, Any], world: CapabilityWorld) -> nn.Sequential:
    """Copy an sb3 model's action path into a plain :func:`build_net` network (no sb3 needed to serve)."""
    net = build_net(net_cfg, world)
    policy = model.policy
    if net_cfg["head"] == "per_action":
        net[1].load_state_dict(policy.mlp_extractor.actor.state_dict())
        return net.eval()
    if hasattr(policy, "q_net"):  # DQN: features extractor -> q_net
        body = list(policy.q_net.q_net)
    else:  # actor-critic: features extractor -> mlp_extractor.policy_net -> action_net
        body = [*policy.mlp_extractor.policy_net, policy.action_net]
    src = [m for m in body if isinstance(m, nn.Linear)]
    dst = [m for m in net[1] if isinstance(m, nn.Linear)]
    if len(src) != len(dst):
        raise RuntimeError(f"export: sb3 network has {len(src)} linear layers, expected {len(dst)}")
    with torch.no_grad():
        for a, b in zip(src, dst, strict=True):
            b.weight.copy_(a.weight)
            b.bias.copy_(a.bias)
    return net.eval()


