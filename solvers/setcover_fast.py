"""Fast exact weighted set cover for batch labelling: a compiled branch and bound.

Each agent's deficit (the capabilities it lacks) and the actions are bitmasks. The search picks
the uncovered capability with the fewest live actions that provide it and branches on which of
them (cheapest first) is the *first* action of the cover providing it; later branches exclude
earlier candidates, so the branches partition the covers and every minimal cover is reached at
most once. That makes two things exact at once: the optimal cost, and the number of distinct
optimal sets (uniqueness), because with positive costs every optimal cover is minimal.
A branch is cut when cost + lower bound exceeds the best cost; the lower bound is the largest,
over uncovered capabilities, of the cheapest live action providing it. Agents are solved in
parallel (numba ``prange``) and identical (group, deficit) patterns are solved once.

Instances that exceed ``max_nodes`` are re-solved with the HiGHS ILP (exact fallback).
"""

from __future__ import annotations

import time

import numba as nb
import numpy as np

from envs.capability import CapabilityWorld
from solvers.base import CoverLabels, SetCoverSolver

_TOL = 1e-9


def pack_bits(M: np.ndarray) -> np.ndarray:
    """Pack a (R, n) boolean matrix into (R, ceil(n/64)) uint64 words (bit j of word j//64)."""
    M = np.atleast_2d(np.asarray(M, dtype=bool))
    R, n = M.shape
    W = max(1, -(-n // 64))
    padded = np.zeros((R, W * 64), dtype=np.uint8)
    padded[:, :n] = M
    bytes_ = np.packbits(padded.reshape(R, W * 8, 8), axis=2, bitorder="little").reshape(R, W * 8)
    return np.ascontiguousarray(bytes_).view("<u8").reshape(R, W).astype(np.uint64)


@nb.njit(cache=True, inline="always")
def _popcount(v):
    v = v - ((v >> np.uint64(1)) & np.uint64(0x5555555555555555))
    v = (v & np.uint64(0x3333333333333333)) + ((v >> np.uint64(2)) & np.uint64(0x3333333333333333))
    v = (v + (v >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (v * np.uint64(0x0101010101010101)) >> np.uint64(56)


@nb.njit(cache=True, inline="always")
def _lowest_index(v):
    """Index of the lowest set bit of a non-zero word."""
    return _popcount((v & (~v + np.uint64(1))) - np.uint64(1))


# Not cached: numba's cache of recursive functions crashes when reloaded.
@nb.njit
def _search(depth, cost, bits, providers, costs, live, chosen, rem_ws, minc_ws, dis_ws, best_cost, best_set,
            best_len, n_opt, nodes, max_nodes):
    """Expand the node whose uncovered capabilities are ``rem_ws[depth]``.

    ``live`` is a bitmask over the cost-sorted actions and ``providers[j]`` the bitmask of
    actions that provide capability j, so counting a capability's live providers is a popcount
    and its cheapest live provider is the lowest set bit. Workspaces are per depth: nothing is
    allocated per node.
    """
    rem = rem_ws[depth]
    W = rem.shape[0]
    AW = live.shape[0]
    nodes[0] += 1
    if nodes[0] > max_nodes:
        return
    # Per uncovered capability: number of live providers and the cheapest one. They give the
    # branching capability (fewest providers), the node's lower bound (the largest cheapest-
    # provider cost) and, below, a bound for each child before recursing.
    minc = minc_ws[depth]
    lb = 0.0
    best_count = 1 << 30
    e = 0
    n_rem = 0
    for w in range(W):
        r = rem[w]
        while r != 0:
            low = r & (~r + np.uint64(1))
            j = w * 64 + _popcount(low - np.uint64(1))
            n_rem += 1
            cnt = 0
            mc = np.inf
            for q in range(AW):
                pl = providers[j, q] & live[q]
                if pl != 0:
                    if cnt == 0:
                        mc = costs[q * 64 + _lowest_index(pl)]
                    cnt += _popcount(pl)
            if cnt == 0:
                return  # nothing left can provide this capability
            minc[j] = mc
            if mc > lb:
                lb = mc
            if cnt < best_count:
                best_count = cnt
                e = j
            r ^= low
    if n_rem > 4:
        # Density bound: every uncovered capability is paid for at no less than the best cost
        # per newly provided capability of any live action (only tighter when many remain).
        ratio = np.inf
        for q in range(AW):
            lv = live[q]
            while lv != 0:
                low = lv & (~lv + np.uint64(1))
                a = q * 64 + _popcount(low - np.uint64(1))
                m = 0
                for w in range(W):
                    m += _popcount(bits[a, w] & rem[w])
                if m > 0 and costs[a] / m < ratio:
                    ratio = costs[a] / m
                lv ^= low
        if ratio * n_rem > lb:
            lb = ratio * n_rem
    b = best_cost[0]
    if b < np.inf and cost + lb > b + _TOL * max(1.0, abs(b)):
        return
    disabled = dis_ws[depth]
    child = rem_ws[depth + 1]
    k = 0
    stop = False
    for q in range(AW):  # candidates in cost order: cheapest branch first
        cand = providers[e, q] & live[q]
        while cand != 0 and not stop:
            low = cand & (~cand + np.uint64(1))
            cand ^= low
            a = q * 64 + _popcount(low - np.uint64(1))
            b = best_cost[0]
            tol = _TOL * max(1.0, abs(b)) if b < np.inf else 0.0
            new_cost = cost + costs[a]
            if b < np.inf and new_cost > b + tol:
                stop = True
                break
            child_lb = 0.0
            empty = True
            for w in range(W):
                r = rem[w] & ~bits[a, w]
                child[w] = r
                if r != 0:
                    empty = False
                while r != 0:
                    lw = r & (~r + np.uint64(1))
                    v = minc[w * 64 + _popcount(lw - np.uint64(1))]
                    if v > child_lb:
                        child_lb = v
                    r ^= lw
            chosen[depth] = a
            live[q] &= ~low  # chosen here, excluded from later sibling branches
            disabled[k] = a
            k += 1
            if empty:  # a leaf: record it without a call
                if new_cost < b - tol:
                    best_cost[0] = new_cost
                    n_opt[0] = 1
                    best_len[0] = depth + 1
                    for i in range(depth + 1):
                        best_set[i] = chosen[i]
                elif new_cost <= b + tol:
                    n_opt[0] += 1
            elif b == np.inf or new_cost + child_lb <= b + tol:
                _search(depth + 1, new_cost, bits, providers, costs, live, chosen, rem_ws, minc_ws, dis_ws,
                        best_cost, best_set, best_len, n_opt, nodes, max_nodes)
        if stop:
            break
    for i in range(k):
        a = disabled[i]
        live[a // 64] |= np.uint64(1) << np.uint64(a % 64)


@nb.njit(parallel=True)
def _solve_all(deficits, allowed, bits, providers, costs, max_nodes, max_len):
    B, W = deficits.shape
    A = bits.shape[0]
    AW = allowed.shape[1]
    depth_cap = W * 64 + 2  # every step covers a new capability
    out_cost = np.full(B, np.inf)
    out_set = np.full((B, max_len), -1, dtype=np.int64)
    out_len = np.zeros(B, dtype=np.int64)
    out_nopt = np.zeros(B, dtype=np.int64)
    out_nodes = np.zeros(B, dtype=np.int64)
    n_workers = min(B, 4 * nb.get_num_threads())
    for t in nb.prange(n_workers):  # workspaces allocated once per worker, not per agent or node
        live = np.empty(AW, dtype=np.uint64)
        chosen = np.empty(A, dtype=np.int64)
        rem_ws = np.empty((depth_cap, W), dtype=np.uint64)
        minc_ws = np.empty((depth_cap, W * 64))
        dis_ws = np.empty((depth_cap, A), dtype=np.int64)
        best_cost = np.empty(1)
        best_set = np.empty(A, dtype=np.int64)
        best_len = np.zeros(1, dtype=np.int64)
        n_opt = np.zeros(1, dtype=np.int64)
        nodes = np.zeros(1, dtype=np.int64)
        for i in range(t, B, n_workers):
            live[:] = allowed[i]
            best_cost[0] = np.inf
            best_len[0] = 0
            n_opt[0] = 0
            nodes[0] = 0
            empty = True
            for w in range(W):
                rem_ws[0, w] = deficits[i, w]
                if deficits[i, w] != 0:
                    empty = False
            if empty:  # already accepted: the empty set, cost 0, unique
                out_cost[i] = 0.0
                out_nopt[i] = 1
                continue
            _search(0, 0.0, bits, providers, costs, live, chosen, rem_ws, minc_ws, dis_ws, best_cost, best_set,
                    best_len, n_opt, nodes, max_nodes)
            out_nodes[i] = nodes[0]
            if best_cost[0] < np.inf:
                out_cost[i] = best_cost[0]
                out_nopt[i] = n_opt[0]
                out_len[i] = best_len[0]
                for j in range(min(best_len[0], max_len)):
                    out_set[i, j] = best_set[j]
    return out_cost, out_set, out_len, out_nopt, out_nodes


class FastSetCover(SetCoverSolver):
    """Exact compiled branch and bound with uniqueness count (see module docstring)."""

    name = "setcover-bnb"

    def __init__(self, max_nodes: int = 2_000_000, dedupe: bool = True):
        self.max_nodes = max_nodes  # per-agent node budget; beyond it the agent is re-solved by the ILP
        self.dedupe = dedupe  # solve each distinct (group, deficit) pattern once

    def label_batch(self, world: CapabilityWorld, X: np.ndarray, groups: np.ndarray | None = None) -> CoverLabels:
        t0 = time.perf_counter()
        X = np.atleast_2d(X)
        deficits = world.deficits(X, groups)
        allowed = np.broadcast_to(world.allowed(groups) if groups is not None
                                  else world.allowed(np.zeros(len(X), dtype=int)), (len(X), world.n_actions))
        rep = np.arange(len(X))  # the agent each solved row stands for
        if self.dedupe:
            key = np.concatenate([deficits, allowed], axis=1) if world.access is not None else deficits
            _, rep, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
            inverse = inverse.reshape(-1)
            deficits, allowed = deficits[rep], allowed[rep]
        order = np.argsort(world.costs, kind="stable")  # cheapest first
        sorted_actions = world.actions[order]
        W = pack_bits(deficits[:1]).shape[1]
        providers = np.zeros((W * 64, world.n_actions), dtype=bool)
        providers[: world.n_features] = sorted_actions.T
        cost, sets, lengths, nopt, nodes = _solve_all(
            pack_bits(deficits), pack_bits(allowed[:, order]), pack_bits(sorted_actions), pack_bits(providers),
            world.costs[order], self.max_nodes, world.n_actions)
        sets = np.where(sets >= 0, order[np.maximum(sets, 0)], -1)[:, : max(1, int(lengths.max(initial=0)))]
        over = nodes > self.max_nodes
        if over.any():  # exact fallback for the rare instance the node budget does not settle
            from solvers.setcover_ilp import PulpSetCover

            fb = PulpSetCover(solver="HiGHS", check_unique=True).label_batch(
                world, X[rep[over]], None if groups is None else groups[rep[over]])
            width = max(sets.shape[1], fb.actions.shape[1])
            sets = np.pad(sets, ((0, 0), (0, width - sets.shape[1])), constant_values=-1)
            sets[over] = np.pad(fb.actions, ((0, 0), (0, width - fb.actions.shape[1])), constant_values=-1)
            cost[over], nopt[over] = fb.cost, fb.n_optimal
        big = np.iinfo(np.int64).max
        sets = np.sort(np.where(sets < 0, big, sets), axis=1)  # canonical ascending order
        sets[sets == big] = -1
        # Exact sums of the integer-valued efforts rather than the search's running float sum.
        cost = np.where(np.isfinite(cost), np.where(sets >= 0, world.costs[np.maximum(sets, 0)], 0).sum(1), cost)
        if self.dedupe:
            cost, sets, nopt = cost[inverse], sets[inverse], nopt[inverse]
        elapsed = time.perf_counter() - t0
        return CoverLabels(cost, sets, nopt.astype(np.int8), np.full(len(X), elapsed / max(len(X), 1)))
