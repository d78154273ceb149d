"""The exhaustive two-step lookahead of the sequential CSCF worlds, batched over agents.

:func:`two_step_best` is the search behind ``lookahead_choose(world, grid, 2)``
(:mod:`learners.policies.sequential`): for every agent, every rejected first step cheaper than a
bound is applied and the second steps from its child are priced by the world. The (agent, first
step) pairs of the whole batch are gathered at once and applied with one ``world.apply`` per
chunk of pairs; the children's second steps are computed with the rules of
:func:`envs.sequential_env.candidates` (``grid_step`` per action, the MLP's incremental first
layer, ``mlp_tail``), but only the second steps that could still win are scored: the classifier
pass over every child's K candidates is most of the cost, and a second step whose total is not
below the agent's bound (or above a total the agent already reached) cannot be chosen. The
answer is the per-agent loop's, tie rule included (``tests/test_sequential_twostep.py``).
"""

from __future__ import annotations

import numpy as np

from envs.sequential import SequentialWorld
from envs.sequential_candidates import Candidates, FlatGrid, dense_columns, grid_step, mlp_tail

#: Bytes a chunk of pairs may take while its children's second steps are scored: per pair and
#: candidate a float32 first-layer row of the MLP (``hidden`` x 4 bytes) and a few float64 (P, n)
#: arrays of ``grid_step``, so the default chunk is sized on both.
CHUNK_BYTES = 50_000_000


def default_chunk(world: SequentialWorld, grid: FlatGrid) -> int:
    """Pairs per chunk so that a chunk's second steps take about :data:`CHUNK_BYTES` at worst."""
    weights = getattr(world.model, "weights", None)
    hidden = int(weights[0].shape[1]) if weights is not None else 0
    return max(1, CHUNK_BYTES // (grid.size * (64 + 4 * hidden)))


def _is_mlp(world: SequentialWorld) -> bool:
    """Whether ``candidates`` scores children incrementally (the same test as there)."""
    return getattr(world.model, "weights", None) is not None and getattr(world.model, "kind", "") == "mlp"


def _pair_totals(world: SequentialWorld, Y: np.ndarray, used: np.ndarray, cost1: np.ndarray,
                 limit: np.ndarray) -> np.ndarray:
    """(P,) for children ``Y`` (P, D) of first steps costing ``cost1``: the cheapest ``cost1 +
    cost2`` over allowed, accepted second steps with that total ``< limit`` (inf: none).

    The same arithmetic as :func:`envs.sequential_env.candidates` on the rows it keeps (mask and
    cost from ``grid_step``; the score's first layer as the child's plus the changed columns in
    the same order, the later layers by ``mlp_tail``), so acceptance is decided as there."""
    P = len(Y)
    G = world.action_discounts(Y)
    mlp = _is_mlp(world)
    if mlp:
        pre = (Y @ world.model.weights[0] + world.model.biases[0]).astype(np.float32)
        W0 = world.model.weights[0].astype(np.float32)
    rows, totals, parts = [], [], []
    for a in range(world.n_actions):
        cols, Ycols, ok, c = grid_step(world, a, Y, G[:, a])
        tot = cost1[:, None] + c  # the loop's cand.cost[i, ks][:, None] + c2.cost on allowed rows
        p, v = np.nonzero(ok & ~used[:, a][:, None] & (tot < limit[:, None]))
        if len(p) == 0:
            continue
        if mlp:
            with np.errstate(invalid="ignore", over="ignore"):
                dY = (Ycols[p, v] - Y[p[:, None], cols]).astype(np.float32)
                h = dY[:, 0, None] * W0[cols[0]]
                for i in range(1, len(cols)):
                    h += dY[:, i, None] * W0[cols[i]]
                h += pre[p]
            parts.append(h)
        else:
            parts.append(world.score(dense_columns(Y[p][:, None, :], cols, Ycols[p, v][:, None, :])[:, 0]))
        rows.append(p)
        totals.append(tot[p, v])
    out = np.full(P, np.inf)
    if not rows:
        return out
    p, tot = np.concatenate(rows), np.concatenate(totals)
    if mlp:  # one pass of the later layers for every kept second step of the chunk
        with np.errstate(invalid="ignore", over="ignore"):
            score = mlp_tail(world.model, np.concatenate(parts))
    else:
        score = np.concatenate(parts)
    acc = score > 0
    np.minimum.at(out, p[acc], tot[acc])
    return out


def two_step_best(world: SequentialWorld, grid: FlatGrid, X: np.ndarray, used: np.ndarray, cand: Candidates,
                  bound: np.ndarray, chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest two-step completion of each of B states that starts with a rejected step and
    is strictly cheaper than ``bound``.

    For state i (``X[i]``, used actions ``used[i]``, its one-step candidates ``cand`` row i), the
    first steps k are the allowed candidates whose child is rejected and whose cost is
    ``< bound[i]``; each is applied with ``world.apply`` and priced ``cand.cost[i, k] + cost2``
    over the allowed second steps from the child (its action now used) that the classifier
    accepts. Returns ``(total, first)``, both (B,): the cheapest such price if it is
    ``< bound[i]`` (else inf) and the flat index of its first step (else -1). Among equal totals
    the smallest first-step index wins, the rule of ``np.argmin`` over the first steps in
    ascending order in the per-agent loop this replaces; with ``bound`` the one-step best it
    returns exactly the steps that loop adopts.

    Pairs are evaluated in chunks of ``chunk`` (default :func:`default_chunk`), each agent's
    cheapest first steps first; after every chunk an agent's limit drops to the best total it
    has reached (ties kept), so later pairs score fewer second steps. The answer does not depend
    on ``chunk``.
    """
    X = np.atleast_2d(np.asarray(X, dtype=float))
    used = np.atleast_2d(np.asarray(used, dtype=bool))
    B = len(X)
    bound = np.broadcast_to(np.asarray(bound, dtype=float), (B,))
    total = np.full(B, np.inf)
    first = np.full(B, -1, dtype=np.int64)
    # row-major nonzero: pairs sorted by agent, then by ascending flat index (the tie order)
    agent, k1 = np.nonzero(cand.mask & ~cand.accepted & (cand.cost < bound[:, None]))
    P = len(agent)
    if P == 0:
        return total, first
    chunk = default_chunk(world, grid) if chunk is None else int(chunk)
    if chunk < 1:
        raise ValueError(f"chunk: must be >= 1, got {chunk}")
    cost1 = cand.cost[agent, k1]
    a1 = grid.action[k1]
    starts = np.flatnonzero(np.r_[True, agent[1:] != agent[:-1]])
    sizes = np.diff(np.r_[starts, P])
    # schedule: every agent's cheapest first step, then every agent's second cheapest, ...: cheap
    # first steps tend to give cheap totals, which tighten the limits of the later chunks
    by_cost = np.lexsort((cost1, agent))
    rank = np.empty(P, dtype=np.int64)
    rank[by_cost] = np.arange(P) - np.repeat(starts, sizes)
    schedule = np.lexsort((agent, rank))
    reached = bound.copy()  # per agent: the bound, then the best total reached so far
    pair_min = np.full(P, np.inf)
    for s in range(0, P, chunk):
        q = schedule[s: s + chunk]
        Y = world.apply(X[agent[q]], a1[q], grid.value[k1[q]]).states
        u = used[agent[q]]  # fancy indexing: a copy
        u[np.arange(len(q)), a1[q]] = True
        # < bound, and <= the best total reached (an equal total of a smaller index may still win)
        lim = np.where(reached[agent[q]] < bound[agent[q]], np.nextafter(reached[agent[q]], np.inf),
                       bound[agent[q]])
        pair_min[q] = _pair_totals(world, Y, u, cost1[q], lim)
        np.minimum.at(reached, agent[q], pair_min[q])
    # per agent (contiguous segments in flat-index order): its minimum, the first pair reaching it
    seg_min = np.minimum.reduceat(pair_min, starts)
    hit = np.flatnonzero((pair_min == np.repeat(seg_min, sizes)) & np.isfinite(pair_min))
    who, at = np.unique(agent[hit], return_index=True)
    total[who] = pair_min[hit[at]]
    first[who] = k1[hit[at]]
    return total, first
