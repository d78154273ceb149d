"""``CornerStudent``: a boosted stand-in of a model that answers in steps, learnt from the model's own answers on
the value vocabulary's corners near agents like the training agents (issue 56).

On a forest seen only through ``predict_proba``, the budgeted search's misses at 2 x 256 are mostly round one
(``benchmarks/round_two_bound.py``): no row it asks is of the optimum's changed set *and* accepted. A forest's
answer near an agent is a pattern of small accepted boxes; the optima sit at corners of the labels' value
vocabulary (``learners/tabular/corners.py``: the values MACE's answers move a column to, just past the splits
that matter), and the corners near an agent can be listed nearest first without building them all. So at fit
time agents are drawn around the training agents (``data_gen.perturbed_agents``), each one's nearest corners are
asked of the model (``corners`` per agent: the nearest ``NEAREST_KEPT`` and a draw from its ``NEAREST``
nearest; the calls and rows are counted, in blocks of ``CALL_ROWS`` rows a call, each block's answers kept in
``memory`` where one is given, so an interrupted fit resumes without asking again), and a histogram
gradient-boosting classifier (scikit-learn) learns which the model accepts. It is kept as an exact white box of
its own trees (``envs.imported_trees.from_fitted``: compiled descent, the same margin for a row in any batch, and
saved as JSON, no pickle). Answering, the agent's ``pool`` nearest corners are scored by the student and the
first ``k`` it accepts with probability above ``threshold``, nearest first, lead round one: the corners a
search without a stand-in would have to ask one by one from the nearest. They are looked for in stages (the
nearest ``STAGE_FIRST``, then ``STAGE_GROWTH`` times more, up to the pool), each agent stopping once it has its
``k``: the same picks as scoring the whole pool, since a shorter list of corners is the head of a longer one,
and most agents find theirs among their first few hundred corners. With ``distinct``, only the corners
the student's own splits tell apart (``corners.distinct_values``; an option, off by default: see
``docs/generators_log.md``, *Only the corners the student tells apart*).

With ``members`` above 1, as many classifiers are fitted, each on its own draw of agents and corners (seeds
``seed``, ``seed + 1``, ...), and a corner's margin is the largest of theirs. One classifier's errors near the
boundary depend on its draw (pick quality varies by up to 20 points between draws) and mostly refuse the
boundary's accepted corners; a corner any member accepts is picked, which recovers many of them at about one
member's precision (Credit forest at 2 x 256, two members: held-out .9025 -> .940; ``docs/generators_log.md``, *The
student's threshold, two students, and round two's near picks*; one classifier on the same rows does worse). The
threshold is also an answering setting (``picks(threshold=...)``, the proposer's ``student_threshold``).

A heuristic, as the search is: its picks are asked of the model like any row; it learns the model, not an
answer. Measured on 400 validation agents per forest (2 x 256, four fits, 10,000 corners): German .879 -> .909,
Credit .719 -> .794, Adult .920 -> .959; on the held-out test agents .868 -> .875, .865 -> .873, .900 -> .945
(``benchmarks/student_forests.py``; ``docs/generators_log.md``, *A student of the forest's corners*).
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data_gen.compute import chunk_path, finished_chunks, load_chunk, run_chunks
from learners.tabular.corner_kernels import side_counts
from learners.tabular.corners import corner_options, nearest_corners, split_cuts
from learners.tabular.geometry import WorldGeometry
from learners.tabular.helper_thread import running, second_thread

NEAREST = 1000  # corners listed per drawn agent at fit time
NEAREST_KEPT = 60  # of them, the nearest this many are always asked (the rest drawn at random)
CALL_ROWS = 1 << 17  # rows per model call at fit time (a remote API is not handed millions of rows at once)
AGENT_BLOCK = 500  # drawn agents whose corners are listed at a time (memory: block x NEAREST x D)
PICK_ROWS = 1 << 18  # corners scored at a time when answering (memory: agents x pool x D); at least one agent's pool
STAGE_FIRST = 128  # corners an agent's picks are looked for among first (its pool's nearest)
STAGE_GROWTH = 2  # then this many times more, up to the pool, only for agents with fewer than k picks so far
CHECK_ROWS = 256  # rows of the first call asked again on a resumed fit: the answers kept must be this model's
SPLIT_ROWS = 512  # rows scored at once from which half are descended on a second thread (a long scan: the p99's agents)


@dataclass
class CornerStudent:
    """Which vocabulary corners near an agent a model in steps accepts, learnt from its answers at fit time."""

    threshold: float = 0.3  # a corner is picked where the student's P(accept) is above this
    pool: int = 10000  # nearest corners per agent the student scores when answering (nearest first, in stages)
    max_iter: int = 400  # the classifier's boosting iterations
    max_leaf_nodes: int = 63  # and leaves per tree
    max_depth: int = 10  # and depth (its trees then descend as complete trees: an answer's picks in milliseconds)
    distinct: bool = False  # score only corners the student tells apart (per numeric feature, one value between two of its splits)
    members: int = 1  # classifiers fitted on independent draws (seeds seed, seed + 1, ...); a corner's margin is the largest of theirs

    def fit(self, world: Any, geo: WorldGeometry, agents: np.ndarray, vocab: list[np.ndarray], *, drawn: int = 10000,
            corners: int = 200, seed: int = 0, memory: str | Path | None = None, call_rows: int = CALL_ROWS,
            progress: bool = False) -> CornerStudent:
        """Draw ``drawn`` agents around ``agents`` (rejected, encoded), ask ``world.model`` (counted: wrap it in a
        ``BlackBoxModel``) about ``corners`` of each one's nearest vocabulary corners, in calls of ``call_rows``
        rows, fit the classifier; with ``members`` above 1, as many draws and classifiers (each its own ``drawn``
        agents and ``corners``: ``members`` times the rows asked). Learns ``members_`` (``envs.models.TreeEnsemble``
        each, its score the classifier's logit) and ``info_`` (the rows of every member). ``memory``: a directory
        that keeps each call's answers (for this model only); a fit interrupted and run again asks only the calls
        it has no answers for, after one call that checks the answers kept there are this model's. ``progress``: a
        progress bar over the rows asked."""
        if int(corners) < 1 or int(drawn) < 1 or int(call_rows) < 1:
            raise ValueError(f"drawn, corners, call_rows: must be >= 1, got {drawn!r}, {corners!r}, {call_rows!r}")
        if int(corners) > NEAREST:
            raise ValueError(f"corners: at most the {NEAREST} nearest an agent has listed, got {corners!r}")
        if int(self.members) < 1:
            raise ValueError(f"members: must be >= 1, got {self.members!r}")
        t0 = time.perf_counter()
        self.members_, infos = [], []
        for m in range(int(self.members)):  # each member its own draw of agents and corners, and its own answers
            trees, info = self._fit_member(world, geo, agents, vocab, int(drawn), int(corners), seed + m,
                                           None if memory is None else Path(memory), int(call_rows), progress)
            self.members_.append(trees)
            infos.append(info)
        rows = sum(i["rows"] for i in infos)
        self.info_ = {"agents": sum(i["agents"] for i in infos), "rows": rows,
                      "accepted": sum(i["accepted"] * i["rows"] for i in infos) / rows,
                      "rows_remembered": sum(i["rows_remembered"] for i in infos), "seconds": time.perf_counter() - t0}
        if len(infos) > 1:
            self.info_["members"] = infos
        return self

    def _fit_member(self, world: Any, geo: WorldGeometry, agents: np.ndarray, vocab: list[np.ndarray], drawn: int,
                    corners: int, seed: int, memory: Path | None, call_rows: int, progress: bool
                    ) -> tuple[Any, dict[str, Any]]:
        """One classifier of the model's answers on one draw of agents (seeded by ``seed``): its trees and its rows."""
        from sklearn.ensemble import HistGradientBoostingClassifier

        from data_gen.perturbed_agents import perturb_agents
        from envs.imported_trees import from_fitted

        rng = np.random.default_rng(seed)
        A = perturb_agents(world, np.asarray(agents, float), int(drawn), seed=seed + 3, allow_fewer=True)
        kept = min(NEAREST_KEPT, int(corners))
        rows = []
        for lo in range(0, len(A), AGENT_BLOCK):
            R, _ = nearest_corners(geo, A[lo:lo + AGENT_BLOCK], vocab, NEAREST)
            pick = np.concatenate([np.arange(kept), np.sort(rng.choice(np.arange(kept, NEAREST),
                                                                       int(corners) - kept, replace=False))])
            S = R[:, pick].reshape(-1, R.shape[-1])
            rows.append(S[~np.isnan(S).any(1)])
        S = np.concatenate(rows)
        y, kept = _ask(world.model, S, memory, call_rows, progress)
        if y.all() or not y.any():
            raise ValueError(f"corners: the model answered all {len(y)} corners alike ({bool(y[0])}); nothing to learn")
        clf = HistGradientBoostingClassifier(max_iter=int(self.max_iter), max_leaf_nodes=int(self.max_leaf_nodes),
                                             max_depth=int(self.max_depth), random_state=seed).fit(S, y)
        return from_fitted(clf), {"agents": int(len(A)), "rows": int(len(S)), "accepted": float(y.mean()),
                                  "rows_remembered": kept}

    def picks(self, geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], k: int, *,
              pool: int | None = None, distinct: bool | None = None, threshold: float | None = None,
              scan: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None) -> np.ndarray:
        """(N, k, D) per agent the first ``k`` of its ``pool`` (default: the student's own) nearest corners whose
        P(accept) by the student is above ``threshold`` (default: the student's own), nearest first; NaN padded
        where fewer are. ``distinct`` (default: the student's own): only corners the student tells apart
        (``corners.distinct_values``). ``scan``: a dict kept between calls on the same agents at the same
        settings (by the agent's bytes: the corners listed so far, their distances and margins), so a call for
        more picks starts where an earlier one stopped (round one's picks, then round two's more of them)."""
        X = np.atleast_2d(np.asarray(X, float))
        pool = int(self.pool if pool is None else pool)
        if pool < 1:
            raise ValueError(f"pool: must be >= 1, got {pool!r}")
        threshold = float(self.threshold if threshold is None else threshold)
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold: a probability in (0, 1), got {threshold!r}")
        block = max(1, PICK_ROWS // pool)
        if len(X) > block:  # memory: N x pool x D corners at once
            return np.concatenate([self.picks(geo, X[i:i + block], vocab, k, pool=pool, distinct=distinct,
                                              threshold=threshold, scan=scan) for i in range(0, len(X), block)])
        distinct = self.distinct if distinct is None else bool(distinct)
        cuts = self.cuts(X.shape[1]) if distinct else None
        out = np.full((len(X), int(k), X.shape[1]), np.nan)
        keys = [row.tobytes() for row in X] if scan is not None else None
        listed = np.array([len(scan[key][2]) if key in scan else 0 for key in keys]) if keys else np.zeros(len(X), int)
        for length in np.unique(listed):  # agents scanned as far, together (none scanned: 0)
            a = np.flatnonzero(listed == length)
            start = [np.stack([scan[keys[i]][part] for i in a]) for part in range(3)] if length else None
            out[a] = self._staged(geo, X[a], vocab, int(k), pool, threshold, cuts, start,
                                  None if keys is None else [keys[i] for i in a], scan)
        return out

    def _staged(self, geo: WorldGeometry, X: np.ndarray, vocab: list[np.ndarray], k: int, pool: int, threshold: float,
                cuts: list[np.ndarray] | None, start: list[np.ndarray] | None, keys: list[bytes] | None,
                scan: dict | None) -> np.ndarray:
        """``picks`` of agents listed and scored alike so far (``start``: their corners, distances and margins,
        or None), in stages from there; each agent's last stage is kept in ``scan`` where one is given."""
        out = np.full((len(X), k, X.shape[1]), np.nan)
        todo = np.arange(len(X))
        R, d, margin = start if start is not None else (None, None, np.zeros((len(X), 0)))
        options = corner_options(geo, X, vocab, cuts=cuts)  # built once for every stage
        size = margin.shape[1] or min(pool, STAGE_FIRST)
        while len(todo):  # nearest first in stages: most agents have their k picks among their first corners
            if margin.shape[1] < size:
                R, d = nearest_corners(geo, X[todo], vocab, size, cuts=cuts, options=options.take(todo))
                # a shorter list is the head of a longer one (tests/test_corners.py): only the new corners are scored
                margin = np.concatenate([margin, self._margins(R[:, margin.shape[1]:], d[:, margin.shape[1]:])], axis=1)
            got, enough = self._first_accepted(R, margin, k, threshold)
            done = enough | (size >= pool)  # k picks among its nearest corners, or its whole pool
            out[todo[done]] = got[done]
            if scan is not None:
                for i in np.flatnonzero(done):
                    scan[keys[todo[i]]] = (R[i], d[i], margin[i])
            keep = ~done
            todo, R, d, margin = todo[keep], R[keep], d[keep], margin[keep]
            size = min(pool, size * STAGE_GROWTH)
        return out

    def _margins(self, R: np.ndarray, d: np.ndarray) -> np.ndarray:
        """(N, m) the student's margin for each corner of ``R`` (N, m, D) at a finite distance ``d``, else -inf. Each
        corner the student's splits do not tell apart from an earlier one (the same side of every split) takes its
        margin, computed once: the same trees' leaves, the same sums, bit for bit."""
        live = np.isfinite(d)
        margin = np.full(d.shape, -np.inf)
        if live.any():
            rows = R[live]
            first, inverse = self._alike(rows)
            margin[live] = self.margin(rows[first])[inverse]
        return margin

    def _alike(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first, inverse): one row of each class of ``rows`` (M, D) that every split of the student sends alike
        (per column, how many of its split points ``cuts`` the value lies above: ``corner_kernels.side_counts``),
        and each row's class."""
        cuts = self.cuts(rows.shape[1])
        used = [j for j, c in enumerate(cuts) if len(c)]
        if not used:
            return np.zeros(1, np.int64), np.zeros(len(rows), np.int64)
        kept = self.__dict__.get("_flat_cuts")
        if kept is None or kept[0] is not cuts:  # the cuts flat, as the kernel reads them: once per list of cuts
            kept = self.__dict__["_flat_cuts"] = (cuts, np.concatenate(cuts),
                                                  np.cumsum([0] + [len(c) for c in cuts]).astype(np.int64))
        sides = side_counts(np.ascontiguousarray(rows, float), kept[1], kept[2], np.asarray(used, np.int64))
        radix = [len(cuts[j]) + 1 for j in used]
        if float(np.prod(np.asarray(radix, float))) < 2.0 ** 62:  # one int64 key a row: a fast unique
            key = np.zeros(len(rows), np.int64)
            for u, r in enumerate(radix):
                key = key * r + sides[:, u]
        else:  # the counts as bytes, as narrow as the most cuts of a column allows
            narrow = sides.astype(np.uint8 if max(radix) <= 256 else np.uint16 if max(radix) <= 65536 else np.int64)
            key = np.ascontiguousarray(narrow).view(np.dtype((np.void, narrow.itemsize * len(used)))).ravel()
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return first, inverse.reshape(-1)

    def margin(self, R: np.ndarray) -> np.ndarray:
        """(M,) the student's logit of acceptance for rows ``R`` (M, D): the largest of its members' (a corner any
        member accepts is picked: more of the boundary's accepted corners than one member's, at their precision).
        ``SPLIT_ROWS`` rows or more, where no search runs in the process: the second half descended on another
        thread (the descent releases the GIL; each row's sums are its own, so the same bits)."""
        if len(R) >= SPLIT_ROWS and not running():
            half = len(R) // 2
            later = second_thread().submit(self._margin_rows, R[half:])
            return np.concatenate([self._margin_rows(R[:half]), later.result()])
        return self._margin_rows(R)

    def _margin_rows(self, R: np.ndarray) -> np.ndarray:
        """``margin`` on this thread."""
        out = self.members_[0].score(R)
        for trees in self.members_[1:]:
            out = np.maximum(out, trees.score(R))
        return out

    def _first_accepted(self, R: np.ndarray, margin: np.ndarray, k: int, threshold: float
                        ) -> tuple[np.ndarray, np.ndarray]:
        """(N, k, D) the first ``k`` corners of ``R`` (nearest first) whose student ``margin`` is over the logit of
        ``threshold``, NaN padded, and (N,) whether each agent has ``k`` of them."""
        chosen = margin > np.log(threshold / (1.0 - threshold))
        order = np.argsort(~chosen, axis=1, kind="stable")[:, :k]  # the chosen first, nearest first
        out = np.take_along_axis(R, order[:, :, None], axis=1)
        out[~np.take_along_axis(chosen, order, axis=1)] = np.nan
        if out.shape[1] < k:  # a pool smaller than k: (N, k, D) still, NaN padded
            out = np.concatenate([out, np.full((len(R), k - out.shape[1], R.shape[2]), np.nan)], axis=1)
        return out, chosen.sum(axis=1) >= k

    def cuts(self, columns: int) -> list[np.ndarray]:
        """Per encoded column, the sorted points where any of the student's trees split it (``corners.split_cuts``),
        computed once."""
        hit = self.__dict__.get("_cuts")
        if hit is None or len(hit) != columns:
            each = [split_cuts(trees, columns) for trees in self.members_]
            hit = [np.unique(np.concatenate([c[j] for c in each])) for j in range(columns)]
            self.__dict__["_cuts"] = hit
        return hit

    def to_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "pool": self.pool, "max_iter": self.max_iter,
                "max_leaf_nodes": self.max_leaf_nodes, "max_depth": self.max_depth, "distinct": self.distinct,
                "members": self.members, "info": self.info_, "trees": self.members_[0].to_dict(),
                "more_trees": [trees.to_dict() for trees in self.members_[1:]]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CornerStudent:
        from envs.models import model_from_dict

        student = cls(float(d["threshold"]), int(d["pool"]), int(d["max_iter"]), int(d["max_leaf_nodes"]),
                      int(d["max_depth"]), bool(d.get("distinct", False)), int(d.get("members", 1)))
        # saved before members: one classifier, under "trees"
        student.members_ = [model_from_dict({"kind": "tree_ensemble", **t}) for t in [d["trees"], *d.get("more_trees", [])]]
        student.info_ = dict(d.get("info", {}))
        return student


def _answers(model: Any, block: np.ndarray) -> dict[str, np.ndarray]:
    """One call's answers (a ``data_gen.compute`` chunk task)."""
    return {"proba": np.asarray(model.predict_proba(block), float)}


def _ask(model: Any, S: np.ndarray, memory: Path | None, call_rows: int, progress: bool) -> tuple[np.ndarray, int]:
    """Whether ``model`` accepts each row of ``S``, asked ``call_rows`` rows a call (``data_gen.compute.run_chunks``:
    each call's answers written whole as it comes back, a rerun asking only the calls it lacks), and how many rows'
    answers were already in ``memory`` (under the digest of ``S``; none kept without one)."""
    if memory is None:
        with tempfile.TemporaryDirectory() as tmp:
            return _ask(model, S, Path(tmp), call_rows, progress)[0], 0
    blocks = [S[i:i + call_rows] for i in range(0, len(S), call_rows)]
    work = memory / f"answers_{hashlib.sha1(np.ascontiguousarray(S).tobytes()).hexdigest()[:24]}-{call_rows}"
    kept = finished_chunks(work, len(blocks))
    if kept:  # a resumed fit: the kept answers must be this model's (one call of a few of their rows)
        again = _answers(model, blocks[kept[0]][:CHECK_ROWS])["proba"]
        if not np.allclose(again, load_chunk(chunk_path(work, kept[0]))["proba"][:CHECK_ROWS], rtol=0.0, atol=1e-9):
            raise ValueError(f"memory: the answers kept in {memory} are not this model's (use a directory per model)")
    out = run_chunks(_answers, model, blocks, work, sizes=[len(b) for b in blocks], desc="student: corners asked",
                     unit="row", progress=progress)
    y = np.concatenate([o["proba"] for o in out]) > float(getattr(model, "threshold", 0.5))
    return y, int(sum(len(blocks[i]) for i in kept))
