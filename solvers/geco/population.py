"""GeCo's candidate population in two representations (paper §5.1).

A candidate is a pair (x', Δ'): the agent's row with some feature groups changed, and the set Δ'
of those groups. Both representations answer the same questions (which groups a candidate
changes, the value of a column, its distance, its full row) and build new candidates the same way
(set a group, cross two candidates), so Algorithm 1 is written once:

- ``ListingPopulation``, the paper's *naive listing*: every candidate as its full encoded row
  (P x d floats) plus the bitset Δ' (P x G).
- ``DeltaPopulation``, the *Δ-representation*: every candidate as the sorted list of the
  feasible-space entries it takes, one per changed group (P x L integers, L = the largest |Δ'|).
  Candidates with the same Δ' are the relation R_Δ' of the paper; a value of x is never stored.
  The full row is built only when a black-box model must see it.

Both consume the random generator identically, so a seeded search returns the same answer in
either representation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TypeVar

import numpy as np

from solvers.geco.space import PAD, AgentSpace

P = TypeVar("P", bound="Population")
_DENSE_CELLS = 1 << 22  # a Δ-population reads values through a P x G entry table up to this size


def row_ids(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal rows of ``A`` get equal ids: ``(ids, first)`` with ids numbered by first occurrence."""
    A = np.ascontiguousarray(A)
    if A.shape[1] == 0:
        return np.zeros(len(A), np.int64), np.zeros(min(len(A), 1), np.int64)
    keys = A.view(np.dtype((np.void, A.dtype.itemsize * A.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # renumber by first occurrence
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse.ravel()], first[order]


def sum_columns(M: np.ndarray) -> np.ndarray:
    """Row sums added left to right (one float order for both representations)."""
    out = np.zeros(len(M))
    for k in range(M.shape[1]):
        out += M[:, k]
    return out


class Population(ABC):
    """Candidates of one agent with their birth generation and their P(accept) (NaN until scored)."""

    def __init__(self, agent: AgentSpace, born: np.ndarray, proba: np.ndarray) -> None:
        self.agent = agent
        self.born = born
        self.proba = proba

    def __len__(self) -> int:
        return len(self.born)

    @classmethod
    @abstractmethod
    def start(cls: type[P], agent: AgentSpace) -> P:
        """The population [(x, {})]: the agent itself, unchanged."""

    @abstractmethod
    def take(self: P, idx: np.ndarray) -> P:
        """The candidates ``idx`` (in that order)."""

    @classmethod
    @abstractmethod
    def concat(cls: type[P], parts: list[P]) -> P:
        """The candidates of several populations of one agent, in order."""

    @abstractmethod
    def has_group(self, g: int) -> np.ndarray:
        """(P,) whether each candidate changes group ``g``."""

    @abstractmethod
    def with_group(self: P, g: int, entries: np.ndarray, born: int) -> P:
        """Copies of the candidates with group ``g`` set to ``entries`` (``PAD``: back to x's value)."""

    @abstractmethod
    def crossover(self: P, i: np.ndarray, j: np.ndarray, take_j: np.ndarray, born: int) -> P:
        """Children changing the groups of both parents; ``take_j`` (n, G): j's value where both change a group."""

    @abstractmethod
    def changed(self) -> np.ndarray:
        """(P, G) bool: the groups each candidate changes (its Δ' as a bitset)."""

    @abstractmethod
    def values_at(self, cols: np.ndarray) -> np.ndarray:
        """(P, T) value of column ``cols[r, t]`` in candidate r."""

    @abstractmethod
    def delta_rows(self) -> np.ndarray:
        """An array whose equal rows mean equal sets Δ'."""

    @abstractmethod
    def group_sets(self, idx: np.ndarray) -> list[np.ndarray]:
        """Δ' of the candidates ``idx`` as sorted group ids."""

    @abstractmethod
    def identity(self) -> np.ndarray:
        """An array whose equal rows mean equal candidates."""

    @abstractmethod
    def delta_terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(l0, l1, linf) of every candidate over the raw features (MACE's normalized deltas)."""

    @abstractmethod
    def rows(self) -> np.ndarray:
        """(P, d) the full encoded rows."""

    @abstractmethod
    def delta_dot(self, W: np.ndarray) -> np.ndarray:
        """(P, H) ``(x' - x) @ W``, from the changed columns only."""

    @abstractmethod
    def sizes(self) -> np.ndarray:
        """(P,) |Δ'|, the number of groups changed."""

    def column_values(self, cols: np.ndarray) -> np.ndarray:
        """(P, k) values of the columns ``cols`` in every candidate."""
        return self.values_at(np.broadcast_to(np.asarray(cols, np.int64), (len(self), len(cols))))

    def distance(self) -> np.ndarray:
        """Eq. 2 (MACE's normalization) of every candidate from x."""
        a, b, g = self.agent.weights
        l0, l1, linf = self.delta_terms()
        return a * l0 + b * l1 + g * linf

    def delta_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """``(key, first)``: the id of each candidate's Δ' (numbered by first occurrence) and its first row."""
        return row_ids(self.delta_rows())

    def _meta(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.born[idx], self.proba[idx]


class DeltaPopulation(Population):
    """The Δ-representation: the entries a candidate takes, one per changed group, sorted by group."""

    def __init__(self, agent: AgentSpace, codes: np.ndarray, born: np.ndarray, proba: np.ndarray) -> None:
        super().__init__(agent, born, proba)
        self.codes = codes  # (P, L) entry ids, PAD-padded on the right
        self._entries: np.ndarray | None = None  # entry_matrix(), built on first use

    @classmethod
    def start(cls, agent: AgentSpace) -> DeltaPopulation:
        return cls(agent, np.zeros((1, 0), np.int64), np.zeros(1, np.int64), np.full(1, np.nan))

    def _new(self, codes: np.ndarray, born: np.ndarray, proba: np.ndarray) -> DeltaPopulation:
        return DeltaPopulation(self.agent, codes, born, proba)

    def _canonical(self, codes: np.ndarray) -> np.ndarray:
        """Slots sorted by group (padding last) and all-padding columns dropped."""
        if codes.shape[1] == 0:
            return codes
        order = np.argsort(self.agent.space.group[codes], axis=1, kind="stable")
        codes = np.take_along_axis(codes, order, axis=1)
        used = (codes != PAD).any(axis=0)
        return codes[:, : int(used.nonzero()[0][-1]) + 1 if used.any() else 0]

    def groups(self) -> np.ndarray:
        return self.agent.space.group[self.codes]

    def take(self, idx: np.ndarray) -> DeltaPopulation:
        codes = self.codes[idx]  # rows stay sorted; only all-padding columns go
        used = (codes != PAD).any(axis=0)
        return self._new(codes[:, : int(used.nonzero()[0][-1]) + 1 if used.any() else 0], *self._meta(idx))

    @classmethod
    def concat(cls, parts: list[DeltaPopulation]) -> DeltaPopulation:
        width = max(p.codes.shape[1] for p in parts)
        codes = np.vstack([np.pad(p.codes, ((0, 0), (0, width - p.codes.shape[1])), constant_values=PAD)
                           for p in parts])
        return cls(parts[0].agent, codes, np.concatenate([p.born for p in parts]),
                   np.concatenate([p.proba for p in parts]))

    def has_group(self, g: int) -> np.ndarray:
        return (self.groups() == g).any(axis=1)

    def with_group(self, g: int, entries: np.ndarray, born: int) -> DeltaPopulation:
        codes = np.where(self.groups() == g, PAD, self.codes)
        codes = np.hstack([codes, np.asarray(entries, np.int64)[:, None]])
        n = len(codes)
        return self._new(self._canonical(codes), np.full(n, born), np.full(n, np.nan))

    def crossover(self, i: np.ndarray, j: np.ndarray, take_j: np.ndarray, born: int) -> DeltaPopulation:
        G = self.agent.space.n_groups
        take = np.hstack([take_j, np.zeros((len(i), 1), bool)])  # the padding group G
        ci, cj = self.codes[i], self.codes[j]
        gi, gj = self.agent.space.group[ci], self.agent.space.group[cj]
        both_i = (gi[:, :, None] == gj[:, None, :]).any(axis=2) & (gi < G)
        both_j = (gj[:, :, None] == gi[:, None, :]).any(axis=2) & (gj < G)
        rows = np.arange(len(i))[:, None]
        ci = np.where(both_i & take[rows, gi], PAD, ci)
        cj = np.where(both_j & ~take[rows, gj], PAD, cj)
        n = len(i)
        return self._new(self._canonical(np.hstack([ci, cj])), np.full(n, born), np.full(n, np.nan))

    def entry_matrix(self) -> np.ndarray:
        """(P, G+1) the entry each candidate takes for every group (PAD: x's value); built once."""
        if self._entries is None:
            G = self.agent.space.n_groups
            E = np.full((len(self), G + 1), PAD, np.int64)
            E[np.arange(len(self))[:, None], self.groups()] = self.codes
            E[:, G] = PAD
            self._entries = E
        return self._entries

    def changed(self) -> np.ndarray:
        return self.entry_matrix()[:, :-1] != PAD

    def values_at(self, cols: np.ndarray) -> np.ndarray:
        sp = self.agent.space
        g = sp.program.col_group[cols]  # (P, T)
        if len(self) * sp.n_groups <= _DENSE_CELLS:
            e = np.take_along_axis(self.entry_matrix(), g, axis=1)
        else:  # many groups: search the few slots instead of a P x G table
            hit = self.groups()[:, None, :] == g[:, :, None]  # (P, T, L)
            e = np.where(hit.any(axis=2), np.take_along_axis(self.codes, hit.argmax(axis=2), axis=1), PAD) \
                if self.codes.shape[1] else np.full(cols.shape, PAD)
        return np.where(e != PAD, sp.values[e, sp.col_offset[cols]], self.agent.x[cols])

    def delta_rows(self) -> np.ndarray:
        return self.groups()

    def group_sets(self, idx: np.ndarray) -> list[np.ndarray]:
        G = self.agent.space.n_groups
        return [row[row < G] for row in self.groups()[idx]]

    def identity(self) -> np.ndarray:
        return self.codes

    def delta_terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = self.agent
        linf = a.sinf[self.codes].max(axis=1) if self.codes.shape[1] else np.zeros(len(self))
        return sum_columns(a.s0[self.codes]), sum_columns(a.s1[self.codes]), linf

    def rows(self) -> np.ndarray:
        sp = self.agent.space
        X = np.tile(self.agent.x_ext, (len(self), 1))
        flat = self.codes.ravel()
        r = np.repeat(np.arange(len(self)), self.codes.shape[1])
        X[r[:, None], sp.cols[flat]] = sp.values[flat]
        X[:, -1] = 0.0
        return X[:, :-1]

    def delta_dot(self, W: np.ndarray) -> np.ndarray:
        key = ("delta_dot", id(W))
        C = self.agent.cache.get(key)
        if C is None:  # per entry: (value - x) @ W over the group's columns; the padding row is 0
            sp = self.agent.space
            W_ext = np.vstack([W, np.zeros((1, W.shape[1]))])
            diff = sp.values - self.agent.x_ext[sp.cols]
            C = np.einsum("ew,ewh->eh", diff, W_ext[sp.cols])
            C[-1] = 0.0
            self.agent.cache[key] = C
        out = np.zeros((len(self), C.shape[1]))
        for k in range(self.codes.shape[1]):
            out += C[self.codes[:, k]]
        return out

    def sizes(self) -> np.ndarray:
        return (self.codes != PAD).sum(axis=1)


class ListingPopulation(Population):
    """The naive listing: full encoded rows and the bitset of changed groups."""

    def __init__(self, agent: AgentSpace, X: np.ndarray, delta: np.ndarray, born: np.ndarray,
                 proba: np.ndarray) -> None:
        super().__init__(agent, born, proba)
        self.X = X  # (P, d)
        self.delta = delta  # (P, G) bool

    @classmethod
    def start(cls, agent: AgentSpace) -> ListingPopulation:
        return cls(agent, agent.x[None].copy(), np.zeros((1, agent.space.n_groups), bool), np.zeros(1, np.int64),
                   np.full(1, np.nan))

    def take(self, idx: np.ndarray) -> ListingPopulation:
        return ListingPopulation(self.agent, self.X[idx], self.delta[idx], *self._meta(idx))

    @classmethod
    def concat(cls, parts: list[ListingPopulation]) -> ListingPopulation:
        return cls(parts[0].agent, np.vstack([p.X for p in parts]), np.vstack([p.delta for p in parts]),
                   np.concatenate([p.born for p in parts]), np.concatenate([p.proba for p in parts]))

    def has_group(self, g: int) -> np.ndarray:
        return self.delta[:, g].copy()

    def with_group(self, g: int, entries: np.ndarray, born: int) -> ListingPopulation:
        sp = self.agent.space
        cols = sp.program.group_cols[g]
        entries = np.asarray(entries, np.int64)
        back = entries == PAD
        X, delta = self.X.copy(), self.delta.copy()
        X[:, cols] = np.where(back[:, None], self.agent.x[cols], sp.values[entries, :len(cols)])
        delta[:, g] = ~back
        n = len(X)
        return ListingPopulation(self.agent, X, delta, np.full(n, born), np.full(n, np.nan))

    def crossover(self, i: np.ndarray, j: np.ndarray, take_j: np.ndarray, born: int) -> ListingPopulation:
        di, dj = self.delta[i], self.delta[j]
        from_j = dj & (~di | take_j)
        X = np.where(from_j[:, self.agent.space.program.col_group], self.X[j], self.X[i])
        n = len(i)
        return ListingPopulation(self.agent, X, di | dj, np.full(n, born), np.full(n, np.nan))

    def changed(self) -> np.ndarray:
        return self.delta

    def values_at(self, cols: np.ndarray) -> np.ndarray:
        return np.take_along_axis(self.X, cols, axis=1)

    def delta_rows(self) -> np.ndarray:
        return self.delta

    def group_sets(self, idx: np.ndarray) -> list[np.ndarray]:
        return [np.flatnonzero(row) for row in self.delta[idx]]

    def identity(self) -> np.ndarray:
        return self.X

    def delta_terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        prog, x = self.agent.space.program, self.agent.x
        P, G = len(self), len(prog.groups)
        t0, t1, tinf = np.zeros((P, G)), np.zeros((P, G)), np.zeros((P, G))
        for g, members in enumerate(prog.groups):  # per group, as the entry terms are built
            for j in members:
                r = prog.raws[j]
                if r.kind == "numeric":
                    dj = np.abs(self.X[:, r.columns[0]] - x[r.columns[0]]) / r.span if r.span > 0 else np.zeros(P)
                else:
                    dj = np.any(self.X[:, list(r.columns)] != x[list(r.columns)], axis=1).astype(float)
                t0[:, g] += dj > 0
                t1[:, g] += dj
                tinf[:, g] = np.maximum(tinf[:, g], dj)
        return sum_columns(t0), sum_columns(t1), tinf.max(axis=1) if G else np.zeros(P)

    def rows(self) -> np.ndarray:
        return self.X

    def delta_dot(self, W: np.ndarray) -> np.ndarray:
        M = self.agent.mutable_cols()
        return (self.X[:, M] - self.agent.x[M]) @ W[M]

    def sizes(self) -> np.ndarray:
        return self.delta.sum(axis=1)


REPRESENTATIONS: dict[str, type[Population]] = {"delta": DeltaPopulation, "listing": ListingPopulation}
