"""GeCo's answers refined beyond the paper: black-box searches from the genetic search's answers
(and from x) towards the decision boundary (issue 34).

:class:`Refinement` is the part of one GeCo run (``solvers.geco.search._Run``) that takes the
counterfactuals the genetic loop found and moves them nearer to x, one batched ``predict_proba``
per round: ``refined`` (a line search of every changed group towards x, and trades between
groups), ``polished`` (the plane of every pair of numeric features: one on a grid, the other
bisected to the boundary), ``ascent`` (a beam search of small moves from x) and ``edges`` (the
model's decision edges along each numeric feature). It reads the run's GeCo parameters ``p``, the
grounded ``agent``, the counting black box ``model`` and the mutable ``groups``, and counts its
calls in ``refine_rounds``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from solvers.geco.population import row_ids
from solvers.geco.space import AgentSpace
from solvers.mace.distance import deltas, directions, mix


class Refinement:
    """Black-box local searches of a GeCo run's answers (mixed into the run: see the module)."""

    p: Any  # the GeCo solver (its parameters)
    agent: AgentSpace
    model: Any  # solvers.blackbox.CountingModel
    groups: np.ndarray  # the agent's mutable groups
    refine_rounds: int
    x_edges: dict[int, np.ndarray]  # ``edges`` through x, kept by ``ascent`` for ``combinations``
    smooth_groups: set[int]  # ordered groups with no thresholds on their line through x (``edges``)

    def distance(self, X: np.ndarray) -> np.ndarray:
        a = self.agent
        raws = a.space.program.raws
        W = None if a.cost is None else directions(raws, a.x, X, a.cost)  # the world's cost weights
        return mix(deltas(raws, a.x, X), a.weights, W)

    def changed_groups(self, X: np.ndarray) -> np.ndarray:
        """(n, G) bool: the groups each full row changes."""
        a = self.agent
        return np.column_stack([(X[:, c] != a.x[c]).any(axis=1) for c in a.space.program.group_cols])

    def polished(self, X: np.ndarray, bases: int = 1) -> np.ndarray:
        """Line searches toward the decision boundary in the plane of two numeric features.

        Beyond the paper (issue 34). From x, and from the ``bases`` nearest answers with their
        numeric changes undone (their categorical changes kept): for every ordered pair (i, j) of
        ordered single-column groups and every direction the schema's mutability allows, feature i
        is set to ``polish_splits`` levels between x_i and the largest change the best distance
        affords (every integer step where there are that few), and feature j is scanned (16 fractions
        of its room) and then bisected (``polish_rounds`` batched black-box calls) for the nearest
        value the model accepts (integer columns round away from x). On a boundary where the optimum trades two features (an
        MLP's, or an integer step of one of them), coordinate moves toward x stop one step short of
        the trade; this search meets it. Returns the best valid point of each base that beats the
        answers (the caller line-searches them once more).
        """
        a, sp = self.agent, self.agent.space
        prog, schema = sp.program, sp.program.schema
        dist = self.distance(X)
        order = np.argsort(dist, kind="stable")
        best = float(dist[order[0]])
        cols = [int(prog.group_cols[g][0]) for g in self.groups if self._ordered(g)]
        if not cols or best <= 0:
            return np.zeros((0, len(a.x)))
        lo, hi = a.bounds()
        integer = {c: bool(schema.features[c].integer or schema.features[c].kind == "ordinal") for c in cols}
        w = a.weights[1] + a.weights[2]  # cost per unit normalized change of one feature (l1 and linf terms)
        raw_of = {int(r.columns[0]): j for j, r in enumerate(prog.raws)}
        dirs = []  # (column, sign, room): allowed directions and the raw change the best distance affords
        for c in cols:
            f, span = schema.features[c], float(hi[c] - lo[c])
            if not (np.isfinite(span) and span > 0):
                continue
            for sgn in (1.0, -1.0):
                if (f.mutability == "increase" and sgn < 0) or (f.mutability == "decrease" and sgn > 0):
                    continue
                room = (hi[c] - a.x[c]) if sgn > 0 else (a.x[c] - lo[c])
                wc = w * (1.0 if a.cost is None else a.cost[raw_of[c], 0 if sgn > 0 else 1])  # cost weight of the move
                room = min(room, best / wc * span) if wc > 0 else room
                if room > 0:
                    dirs.append((c, sgn, float(room)))
        if not dirs:
            return np.zeros((0, len(a.x)))
        m = int(self.p.polish_splits)
        base_rows = [a.x.copy()]
        for i in order[:bases]:
            r = X[i].copy()
            r[cols] = a.x[cols]
            base_rows.append(r)
        B0 = np.unique(np.array(base_rows), axis=0)
        rows, jcol, jsgn, jtop = [], [], [], []
        for ci, si, ri in dirs:
            if integer[ci] and ri <= m:
                lv = np.arange(0.0, np.floor(ri + 1e-9) + 1.0)
            else:
                lv = np.linspace(0.0, ri, m + 1)
                lv = np.unique(np.round(lv)) if integer[ci] else lv
            for cj, sj, rj in dirs:
                if cj == ci:
                    continue
                for B in B0:
                    R = np.repeat(B[None], len(lv), axis=0)
                    R[:, ci] = a.x[ci] + si * lv
                    rows.append(R)
                    jcol.append(np.full(len(lv), cj))
                    jsgn.append(np.full(len(lv), sj))
                    jtop.append(np.full(len(lv), rj))
        if not rows:
            return np.zeros((0, len(a.x)))
        R, jc, js, hi_s = np.vstack(rows), np.concatenate(jcol), np.concatenate(jsgn), np.concatenate(jtop)
        is_int = np.array([integer[c] for c in jc])
        n = np.arange(len(R))

        def points(step: np.ndarray) -> np.ndarray:
            P = R.copy()
            step = np.where(is_int, np.ceil(step - 1e-9), step)
            P[n, jc] = np.clip(a.x[jc] + js * step, lo[jc], hi[jc])
            return P

        def valid(P: np.ndarray) -> np.ndarray:
            ok = a.keeps(P)
            if ok.any():
                ok[ok] = self.model.predict_proba(P[ok]) > self.p.threshold
            return ok

        cheap = self.distance(points(np.zeros(len(R)))) < best  # the level alone leaves room to gain
        R, jc, js, hi_s, is_int = R[cheap], jc[cheap], js[cheap], hi_s[cheap], is_int[cheap]
        n = np.arange(len(R))
        # A coarse scan along j (even and geometric fractions of its room) brackets the nearest valid
        # step; validity need not hold beyond it (a tree accepts on an interval).
        fr = np.unique(np.concatenate([np.linspace(0.0, 1.0, 9), np.exp2(-np.arange(1.0, 9.0))]))
        found = np.full(len(R), np.nan)
        below = np.zeros(len(R))
        for f in fr[1:]:
            todo = np.isnan(found)
            if not todo.any():
                break
            ok = valid(points(f * hi_s)) & todo
            self.refine_rounds += 1
            found[ok] = f * hi_s[ok]
            below[todo & ~ok] = f * hi_s[todo & ~ok]
        keep = ~np.isnan(found)
        R, jc, js, is_int = R[keep], jc[keep], js[keep], is_int[keep]
        hi_s, lo_s, n = found[keep], below[keep], np.arange(int(keep.sum()))
        if not len(R):
            return np.zeros((0, len(a.x)))
        for _ in range(int(self.p.polish_rounds)):
            mid = (lo_s + hi_s) / 2
            ok = valid(points(mid))
            self.refine_rounds += 1
            hi_s, lo_s = np.where(ok, mid, hi_s), np.where(ok, lo_s, mid)
            if np.all(hi_s - lo_s <= np.where(is_int, 0.5, 0.0)):
                break
        P = points(hi_s)
        d = self.distance(P)
        k = int(np.argmin(d))
        return P[k][None] if d[k] < best - 1e-15 else np.zeros((0, len(a.x)))

    def ascent(self, beam: int = 16, depth: int = 6, keep: int = 5) -> np.ndarray:
        """Counterfactuals built from x by small moves: a beam search that adds one group's move at a
        time (an ordered group to a data value near x, see ``_local``; another group to one of its
        cheapest values), keeping the ``beam`` rows of highest P(accept), one batched call per depth.
        Returns the ``keep`` nearest counterfactuals met. Trees cut features at thresholds between data
        values, so an optimum of a forest is often several such small moves together, which the
        genetic search, sampling by frequency, rarely assembles."""
        a, sp = self.agent, self.agent.space
        prog, m = sp.program, int(self.p.refine_samples)
        moves = []  # (columns, (n, |columns|) values) per group
        edges = self.x_edges = self.edges() if self.p.polish else {}
        for g in self.groups:
            cols = prog.group_cols[g]
            if self._ordered(g):
                vals = np.concatenate([self._local(g, side) for side in (-1.0, 1.0)] + [edges.get(g, np.zeros(0))])
                vals = np.unique(vals)[:, None]
            else:
                opts = a.options(g)
                vals = sp.values[opts[np.argsort(a.entry_cost(opts), kind="stable")][:m], :len(cols)]
            moves.append((cols, vals))
        rows = a.x[None].copy()
        p0 = float(self.model.predict_proba(rows)[0])
        found = [np.zeros((0, len(a.x)))]
        for _ in range(depth):
            blocks = []
            for cols, vals in moves:
                free = rows[np.all(rows[:, cols] == a.x[cols], axis=1)]
                T = np.repeat(free, len(vals), axis=0)
                T[:, cols] = np.tile(vals, (len(free), 1))
                blocks.append(T)
            T = np.vstack(blocks)
            _, first = row_ids(T)
            T = T[np.sort(first)]
            T = T[a.keeps(T)]
            if not len(T):
                break
            p = self.model.predict_proba(T)
            self.refine_rounds += 1
            ok = p > self.p.threshold
            found.append(T[ok])
            rest = np.flatnonzero(~ok)  # the beam: highest P(accept), and highest gain per distance,
            gain = (p[rest] - p0) / np.maximum(self.distance(T[rest]), 1e-300)  # one row per Δ' each
            pick = []
            for order, n in ((np.argsort(-p[rest], kind="stable"), beam // 2),
                             (np.argsort(-gain, kind="stable"), beam - beam // 2)):
                _, heads = row_ids(self.changed_groups(T[rest[order]]))
                pick.append(rest[order[np.sort(heads)[:n]]])
            rows = T[np.unique(np.concatenate(pick))]
            if not len(rows):
                break
        F = np.vstack(found)
        return F[np.argsort(self.distance(F), kind="stable")[:keep]]

    def combinations(self, bound: float, depth: int = 4, cap: int = 20000, keep: int = 5) -> np.ndarray:
        """Counterfactuals cheaper than ``bound`` made of up to ``depth`` small moves of distinct groups.

        Beyond the paper (issue 34). The moves are those of ``ascent`` (an ordered group to the model's
        edges on its line through x, or to data values near x; another group to its cheapest values),
        each cheaper than ``bound`` alone. Every combination of moves of distinct groups whose distance
        stays below ``bound`` is scored, one batched call per number of moves; a combination the model
        accepts is not extended (more moves only cost more), and where more than ``cap`` remain the
        cheapest are kept. The distance only grows as moves are added, so no combination below the
        bound is pruned before ``cap`` binds: a forest's optimum often needs three or four threshold
        crossings at once, each of which alone lowers P(accept) or leaves it unchanged, where a beam
        ranked by P(accept) does not go. Returns the ``keep`` nearest counterfactuals found."""
        a, sp = self.agent, self.agent.space
        prog, m = sp.program, int(self.p.refine_samples)
        if not np.isfinite(bound) or bound <= 0:
            return np.zeros((0, len(a.x)))
        edges = getattr(self, "x_edges", {})  # the edges ``ascent`` found on the lines through x
        moves = []
        smooth = getattr(self, "smooth_groups", set())
        for g in self.groups:
            cols = prog.group_cols[g]
            if self._ordered(g):
                if int(g) in smooth:  # a smooth line: the refinement and the polish search it
                    continue
                vals = np.unique(np.concatenate([self._local(g, side) for side in (-1.0, 1.0)]
                                                + [edges.get(g, np.zeros(0))]))[:, None]
            else:
                opts = a.options(g)
                vals = sp.values[opts[np.argsort(a.entry_cost(opts), kind="stable")][:m], :len(cols)]
            T = np.repeat(a.x[None], len(vals), axis=0)
            T[:, cols] = vals
            vals = vals[self.distance(T) < bound]
            if len(vals):
                moves.append((cols, vals))
        level, last = a.x[None].copy(), np.array([-1])
        found = [np.zeros((0, len(a.x)))]
        for _ in range(depth):
            blocks, lasts = [], []
            for gi, (cols, vals) in enumerate(moves):
                src = np.flatnonzero(last < gi)  # groups in a fixed order: each combination once
                if not len(src):
                    continue
                T = np.repeat(level[src], len(vals), axis=0)
                T[:, cols] = np.tile(vals, (len(src), 1))
                blocks.append(T)
                lasts.append(np.full(len(T), gi))
            if not blocks:
                break
            T, L = np.vstack(blocks), np.concatenate(lasts)
            d = self.distance(T)
            cheap = np.flatnonzero(d < bound)
            if len(cheap) > cap:
                cheap = cheap[np.argsort(d[cheap], kind="stable")[:cap]]
            T, L = T[cheap], L[cheap]
            if not len(T):
                break
            ok = a.keeps(T)
            valid = np.zeros(len(T), bool)
            valid[ok] = self.model.predict_proba(T[ok]) > self.p.threshold
            self.refine_rounds += 1
            found.append(T[valid])
            level, last = T[~valid], L[~valid]
        F = np.vstack(found)
        return F[np.argsort(self.distance(F), kind="stable")[:keep]]

    def refined(self, X: np.ndarray) -> np.ndarray:
        """Local search of the answers towards x, one batched black-box call per round.

        Each round, every answer tries (i) x's value for each changed group; (ii) for numeric and
        ordinal single-column groups, ``refine_samples`` probes on the segment between its value
        and the nearest value known to fail (initially x's own), integers on integer columns, down
        to 1e-6 of the range; for other groups, the cheapest data values; and, once no segment of
        the answer is open, (iii) data values across x (the other direction, spread by rank) and
        trades: one changed group back to x's value while a numeric one moves further (a geometric
        ladder of steps), which reach optima that moves towards x cannot. The answer takes the probe that lowers its distance most; the
        search stops when a round learns nothing.
        """
        a = self.agent
        X = X.copy()
        lo: dict[tuple[int, int], float] = {}  # (answer, column) -> value on x's side known to fail
        tried: dict[int, bytes] = {}  # answer -> the row whose trades were probed (not again)
        for _ in range(int(self.p.refine_rounds)):
            blocks, owner = self._probes(X, lo, tried)
            if not blocks:
                break
            self.refine_rounds += 1
            P = np.vstack(blocks)
            who, col, val = (np.concatenate(o) for o in zip(*owner, strict=True))
            ok = a.keeps(P)
            valid = np.zeros(len(P), bool)
            valid[ok] = self.model.predict_proba(P[ok]) > self.p.threshold
            dist, base = self.distance(P), self.distance(X)
            better = np.flatnonzero(valid & (dist < base[who] - 1e-15))
            best: dict[int, int] = {}  # answer -> its best probe (the nearest; the first of equals)
            for n in better[np.lexsort((better, dist[better]))]:
                best.setdefault(int(who[n]), int(n))
            learned = False
            segs: dict[tuple[int, int], list[tuple[float, bool]]] = {}
            for n in np.flatnonzero(col >= 0):
                segs.setdefault((int(who[n]), int(col[n])), []).append((float(val[n]), bool(valid[n])))
            for (i, c), seen in segs.items():  # the failing probe nearest the first passing one
                gap = [abs(v - a.x[c]) for v, passed in seen if passed]
                limit = min(gap) if gap else abs(X[i, c] - a.x[c])
                failing = [v for v, passed in seen if not passed and abs(v - a.x[c]) < limit]
                if failing:
                    lo[(i, c)] = max(failing, key=lambda v, c=c: abs(v - a.x[c]))
                    learned = True
            for i, n in best.items():  # a bound holds for the row it was learned on: others start afresh
                X[i] = P[n]
                for key in [key for key in lo if key[0] == i and key[1] != col[n]]:
                    del lo[key]
            if not best and not learned:
                break
        return X

    def _probes(self, X: np.ndarray, lo: dict[tuple[int, int], float],
                tried: dict[int, bytes]) -> tuple[list[np.ndarray], list[tuple[np.ndarray, ...]]]:
        """The probe rows of one refinement round, in blocks, and per block the (answer, segment
        column or -1, value) of each row."""
        a, sp = self.agent, self.agent.space
        prog, schema, m = sp.program, sp.program.schema, int(self.p.refine_samples)
        blocks: list[np.ndarray] = []
        owner: list[tuple[np.ndarray, ...]] = []

        def add(i: int, T: np.ndarray, c: int = -1, v: np.ndarray | None = None) -> None:
            if len(T):
                blocks.append(T)
                owner.append((np.full(len(T), i), np.full(len(T), c), np.full(len(T), np.nan) if v is None else v))

        rank = np.empty(len(X), np.int64)
        rank[np.argsort(self.distance(X), kind="stable")] = np.arange(len(X))
        for i, (row, moved) in enumerate(zip(X, self.changed_groups(X), strict=True)):
            if tried.get(i) == row.tobytes():  # converged and traded: every probe of it is known
                continue
            changed = [int(g) for g in np.flatnonzero(moved)]
            ordered = {g: int(prog.group_cols[g][0]) for g in changed if self._ordered(g)}
            reverted = {}
            for g in changed:
                reverted[g] = row.copy()
                reverted[g][prog.group_cols[g]] = a.x[prog.group_cols[g]]
            add(i, np.array([reverted[g] for g in changed]).reshape(-1, len(row)))
            bound = {c: lo.get((i, c), a.x[c]) for c in ordered.values()}
            bound = {c: w if (w - a.x[c]) * (row[c] - a.x[c]) >= 0 else a.x[c] for c, w in bound.items()}  # flipped
            segments = {g: self._segment(schema.features[c], bound[c], row[c], m, sp.values[sp.entries(g), 0])
                        for g, c in ordered.items()}
            for g, c in ordered.items():
                T = np.repeat(row[None], len(segments[g]), axis=0)
                T[:, c] = segments[g]
                add(i, T, c, segments[g])
            for g in set(changed) - set(ordered):
                cols, opts = prog.group_cols[g], a.options(g)
                now = self.distance(row[None])[0] - self.distance(reverted[g][None])[0]
                cost = a.entry_cost(opts)
                e = opts[np.argsort(cost, kind="stable")][:m][np.sort(cost)[:m] < now - 1e-12]
                T = np.repeat(row[None], len(e), axis=0)
                T[:, cols] = sp.values[e, :len(cols)]
                add(i, T)
            if not any(len(v) for v in segments.values()) and rank[i] < int(self.p.n_diverse):
                tried[i] = row.tobytes()  # converged, and among the k nearest: the other side of x, and trades
                for g, c in ordered.items():
                    known = sp.values[sp.entries(g), 0]
                    other = known[(known - a.x[c]) * (row[c] - a.x[c]) < 0]  # sorted; spread by rank
                    v = np.unique(other[np.linspace(0, len(other) - 1, min(m, len(other))).astype(int)])
                    T = np.repeat(row[None], len(v), axis=0)
                    T[:, c] = v
                    add(i, T)
                for T in self._trades(row, changed, ordered):
                    add(i, T)
        return blocks, owner

    def _trades(self, row: np.ndarray, changed: list[int], ordered: dict[int, int]) -> list[np.ndarray]:
        """Trades of a converged answer: one changed group g moves part or all of the way back to x
        (ordered groups: 0, 1/4, 1/2 and 3/4 of its change left; others: x's value) while one other
        group h moves: a changed ordered h further from x (a geometric ladder of steps), an unchanged
        ordered h to the data values nearest x on either side (ranks 1, 2, 4, ..., where a tree's
        thresholds lie), any other h to its cheapest data values. These reach the optima that moves
        towards x cannot: a different mix of features on the same decision boundary."""
        a, sp = self.agent, self.agent.space
        prog, schema, m = sp.program, sp.program.schema, int(self.p.refine_samples)
        out = []
        moves: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # h -> (columns, (n, |columns|) values)
        for h in self.groups:
            cols = prog.group_cols[h]
            if h in ordered:
                c = ordered[h]
                f = schema.features[c]
                if h in changed:
                    vals = self._ladder(f, a.x[c], row[c], m, a.bounds()[0][c], a.bounds()[1][c])
                else:
                    vals = np.concatenate([self._local(h, side) for side in (-1.0, 1.0)])
                moves[h] = (cols, vals[:, None])
            else:
                opts = a.options(h)
                opts = opts[np.argsort(a.entry_cost(opts), kind="stable")][:m]
                moves[h] = (cols, sp.values[opts, :len(cols)])
        for g in changed:
            cols_g = prog.group_cols[g]
            if g in ordered:
                c = ordered[g]
                f = schema.features[c]
                left = a.x[c] + (row[c] - a.x[c]) * (1.0 - np.exp2(-np.arange(0.0, 5.0)))
                if f.integer or f.kind == "ordinal":
                    left = np.round(left)
                left = np.unique(left[left != row[c]])
                bases = np.repeat(row[None], len(left), axis=0)
                bases[:, c] = left
            else:
                bases = row[None].copy()
                bases[:, cols_g] = a.x[cols_g]
            for h, (cols, vals) in moves.items():
                if h == g or not len(vals):
                    continue
                T = np.repeat(bases, len(vals), axis=0)
                T[:, cols] = np.tile(vals, (len(bases), 1))
                out.append(T)
        return out

    def edges(self, base: np.ndarray | None = None, grid: int = 128, per_side: int = 6,
              rounds: int = 20) -> dict[int, np.ndarray]:
        """Per ordered group: the values just past the nearest places where P(accept) changes on its
        line through ``base`` (default x; the other features at base's values), ``per_side`` on each
        side of base's value; only groups base leaves at x's value.

        Beyond the paper (issue 34; with ``polish``). One batched call scans every line on a grid (the
        data's values and an even grid, ``grid`` of each at most); each change of P between neighbours
        is then bisected (``rounds`` batched calls) to the far side of the change. A forest's optimum
        is a few such threshold crossings together, often between data values far from x; the beam
        of ``ascent`` starts from these moves. Through x, the groups on whose lines P changes between
        most neighbours of the grid (a smooth model: no thresholds there) are kept in ``smooth_groups``.
        """
        a, sp = self.agent, self.agent.space
        schema = sp.program.schema
        lo, hi = a.bounds()
        record = base is None
        base = a.x if base is None else np.asarray(base, float)
        lines = []  # (group, column, values sorted away from x)
        for g in self.groups:
            if not self._ordered(g):
                continue
            c = int(sp.program.group_cols[g][0])
            if base[c] != a.x[c]:
                continue
            f = schema.features[c]
            if not (np.isfinite(hi[c] - lo[c]) and hi[c] > lo[c]):
                continue
            data = np.unique(sp.values[a.options(g), 0])
            if len(data) > grid:
                data = data[np.linspace(0, len(data) - 1, grid).astype(int)]
            ladder = (hi[c] - lo[c]) * np.exp2(-np.linspace(0.0, 24.0, grid // 2))  # dense near base and near 0
            v = np.unique(np.concatenate([data, np.linspace(lo[c], hi[c], grid + 1), base[c] + ladder, base[c] - ladder,
                                          lo[c] + ladder]))
            v = v[(v >= lo[c]) & (v <= hi[c])]
            if f.integer or f.kind == "ordinal":
                v = np.unique(np.round(v))
            for side in (-1.0, 1.0):
                w = v[(v - a.x[c]) * side > 0]
                if (f.mutability == "increase" and side < 0) or (f.mutability == "decrease" and side > 0) or not len(w):
                    continue
                lines.append((g, c, side, np.concatenate([[a.x[c]], w[np.argsort(np.abs(w - a.x[c]))]])))
        if not lines:
            return {}
        rows = np.repeat(base[None], sum(len(w) for *_, w in lines), axis=0)
        at = np.cumsum([0] + [len(w) for *_, w in lines])
        for (_g, c, _side, w), s0 in zip(lines, at[:-1], strict=True):
            rows[s0:s0 + len(w), c] = w
        # the model's edges, not answers: under the world's rules every row of the lines (within the agent's
        # box) is scored, as a move that breaks a rule alone (a link) may be one of a combination that keeps it
        ok = a.keeps(rows) if a.box is None else np.ones(len(rows), bool)
        p = np.full(len(rows), np.nan)
        p[ok] = self.model.predict_proba(rows[ok])
        self.refine_rounds += 1
        near, far, col, grp = [], [], [], []
        smooth = set()
        for (g, c, _side, w), s0 in zip(lines, at[:-1], strict=True):
            q = p[s0:s0 + len(w)]
            steps = np.abs(np.diff(q)) > 1e-12
            if steps.mean() > 0.5:  # P changes between most neighbours: no thresholds on this line
                smooth.add(int(g))
            change = np.flatnonzero(steps)[:per_side]
            near += list(w[change])
            far += list(w[change + 1])
            col += [c] * len(change)
            grp += [g] * len(change)
        if record:
            self.smooth_groups = smooth
        if not near:
            return {}
        near, far, col = np.array(near), np.array(far), np.array(col)
        integer = np.array([schema.features[c].integer or schema.features[c].kind == "ordinal" for c in col])
        base = np.repeat(base[None], len(col), axis=0)
        idx = np.arange(len(col))
        base[idx, col] = near
        p_near = self.model.predict_proba(base)
        for _ in range(rounds):
            mid = (near + far) / 2
            mid = np.where(integer, np.where(far > near, np.ceil(mid), np.floor(mid)), mid)
            open_ = (mid != far) & (mid != near)
            if not open_.any():
                break
            T = base.copy()
            T[idx, col] = mid
            same = np.abs(self.model.predict_proba(T) - p_near) <= 1e-12
            self.refine_rounds += 1
            near = np.where(open_ & same, mid, near)
            far = np.where(open_ & ~same, mid, far)
        out: dict[int, list[float]] = {}
        for g, v in zip(grp, far, strict=True):
            out.setdefault(int(g), []).append(float(v))
        return {g: np.unique(v) for g, v in out.items()}

    def _local(self, g: int, side: float) -> np.ndarray:
        """The data values of ordered group g on one side of x's value, at ranks 1, 2, 4, ... from it."""
        a, sp = self.agent, self.agent.space
        c = int(sp.program.group_cols[g][0])
        v = sp.values[a.options(g), 0]
        v = v[(v - a.x[c]) * side > 0]
        v = v[np.argsort(np.abs(v - a.x[c]), kind="stable")]
        ranks = (1 << np.arange(int(np.log2(max(len(v), 1))) + 1)) - 1
        return v[ranks[ranks < len(v)]]

    def _ordered(self, g: int) -> bool:
        """A single numeric or ordinal column: searched on a line."""
        cols = self.agent.space.program.group_cols[g]
        return len(cols) == 1 and self.agent.space.program.schema.features[cols[0]].kind in ("numeric", "ordinal")

    @staticmethod
    def _segment(f: Any, lo: float, v: float, m: int, known: np.ndarray) -> np.ndarray:
        """Probe values strictly between ``lo`` (fails) and ``v`` (passes): m evenly spaced, m / 2
        closing in on ``lo`` geometrically and the m / 2 data values (``known``) nearest ``lo``,
        so that a narrow passing interval near x (a split at a small amount) is not stepped over."""
        if abs(v - lo) <= (0.5 if f.integer or f.kind == "ordinal" else 1e-6 * (f.upper - f.lower)):
            return np.zeros(0)
        inner = np.concatenate([lo + (v - lo) * np.arange(1, m + 1) / (m + 1),
                                lo + (v - lo) * np.exp2(-np.arange(2, m // 2 + 2))])
        between = known[(known - lo) * (v - known) > 0]
        inner = np.concatenate([inner, between[np.argsort(np.abs(between - lo), kind="stable")][: m // 2]])
        if f.integer or f.kind == "ordinal":
            inner = np.round(inner)
        return np.unique(inner[(inner - lo) * (v - inner) > 0])

    @staticmethod
    def _ladder(f: Any, x: float, v: float, m: int, lo: float | None = None, hi: float | None = None) -> np.ndarray:
        """Up to m values beyond ``v`` away from ``x``: steps of |v - x| times 2^-8 ... 2^4, within range
        (``lo``, ``hi``: the column's bounds in the agent's box, ``AgentSpace.bounds``; default the schema's)."""
        out = v + np.sign(v - x) * abs(v - x) * np.exp2(np.linspace(-8.0, 4.0, m))
        out = np.clip(out, f.lower if lo is None else lo, f.upper if hi is None else hi)
        if f.integer or f.kind == "ordinal":
            out = np.round(out)
        return np.unique(out[out != v])
