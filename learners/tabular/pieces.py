"""The linear pieces of a ReLU MLP or LR (where the score is affine): answers re-chosen on their piece.

- ``region_step``: a fractional knapsack on the piece (the features that buy the most score per unit
  of distance first), a few overshoots, one model call per round;
- ``piece_optimum``: the exact optimum of the cost-weighted l1 distance over an answer's piece (each
  ReLU unit keeps its side, the score clears the margin), integer columns moving in whole steps
  (a MILP: HiGHS through ``scipy.optimize.milp``) and the world's rules kept: each clause by the
  disjunct the start keeps, so the start is always feasible and the result never farther.

Both are heuristics beyond the piece (a nearer answer may lie on another); every row they return was
accepted by a model call and keeps the rules. Other models: answers come back unchanged."""

from __future__ import annotations

import numpy as np

from envs.rowwise import rowwise_matmul
from envs.tabular import TabularWorld
from learners.tabular.geometry import MARGIN as MARGIN_SCORE
from learners.tabular.geometry import WorldGeometry, accepts_for

REGION_OVERSHOOT = (1.0 + 1e-6, 1.001, 1.01, 1.05)  # multiples of the score a linear piece says is missing


def affine_layers(world: TabularWorld) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """A ReLU MLP's or LR's layers (weights, biases), or None for another model."""
    from envs.models import LinearModel, MLPModel

    model = getattr(world.model, "model", world.model)  # a counting wrapper forwards to the model
    if isinstance(model, MLPModel):
        return model.weights, model.biases
    if isinstance(model, LinearModel):
        return [model.w[:, None]], [np.array([model.b])]
    return None


WHOLE_STEPS = 200  # an integer column with at most this many steps is an integer variable of the MILP
PIECE_CHUNK = 32  # starts per block-diagonal MILP: HiGHS's time grows faster than the block count


def _piece_rows(weights: list[np.ndarray], biases: list[np.ndarray], C: np.ndarray, cols: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """On the linear piece each row of ``C`` lies on: (N, H) every ReLU unit's pre-activation and
    (N, H, K) its gradient in the columns ``cols``, (N, H) its side (+1 active, -1 not), and the
    score (N,) and its gradient (N, K). Within the piece all of these are affine in ``C[:, cols]``."""
    h, J = C, np.broadcast_to(weights[0][cols].T, (len(C),) + weights[0][cols].T.shape)
    zs, Js, sides = [], [], []
    for W, b in zip(weights[:-1], biases[:-1], strict=True):
        if Js:  # the gradient through the previous layer's active units
            J = np.einsum("ik,ni,nir->nkr", W, sides[-1] > 0, Js[-1])
        z = rowwise_matmul(h, W) + b  # each answer's piece alone: the same bits in any batch
        zs.append(z)
        Js.append(J)
        sides.append(np.where(z > 0, 1.0, -1.0))
        h = np.maximum(z, 0.0)
    score = (rowwise_matmul(h, weights[-1]) + biases[-1])[:, 0]
    g = np.einsum("i,ni,nir->nr", weights[-1][:, 0], sides[-1] > 0, Js[-1]) if Js else \
        np.broadcast_to(weights[-1][cols, 0], (len(C), len(cols)))
    if not zs:  # LR: no units
        return (np.zeros((len(C), 0)), np.zeros((len(C), 0, len(cols))), np.zeros((len(C), 0)), score, g)
    return np.concatenate(zs, 1), np.concatenate(Js, 1), np.concatenate(sides, 1), score, g


def _piece_inputs(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, *, integers: bool = False):
    """What the two piece steps start from, or None where they have nothing to do (not a ReLU MLP or
    LR, no movable numeric column, no answer): the model's (weights, biases), the movable numeric
    columns (real-valued ones only unless ``integers``: the fractional fill does not price whole
    steps, the MILP does), the rows of ``C`` that hold an answer, the agents' boxes (lo, hi) and the
    columns' spans."""
    layers = affine_layers(world)
    cols = np.flatnonzero(geo.numeric & ~geo.fixed & (integers | ~geo.rounded))
    rows = np.flatnonzero(~np.isnan(C).any(1))
    if layers is None or not len(cols) or not len(rows):
        return None
    return layers, cols, rows, geo.box(X), geo.span[cols]


def region_step(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, *, rounds: int = 2
                ) -> np.ndarray:
    """A ReLU MLP or LR: each answer's real-valued changes re-chosen on the linear piece it lies on,
    where the score is affine: from the agent's real values (its other changes kept), the features
    that buy the most score per unit of distance move first, each up to its bound, until the piece
    says the decision flips (a fractional knapsack: the l1 optimum on that piece), at a few overshoots
    of the missing score since the piece may end first. All candidates of all agents in one model
    call per round; an answer is replaced only by an accepted, nearer one. A heuristic (the piece's
    optimum need not be the model's). Other models: ``C`` unchanged."""
    C = C.copy()
    inputs = _piece_inputs(world, geo, X, C)
    if inputs is None:
        return C
    (weights, biases), num, rows, (lo, hi), span = inputs
    factors = np.asarray(REGION_OVERSHOOT)
    for _ in range(rounds):
        x, c = X[rows], C[rows]
        *_, score, w = _piece_rows(weights, biases, c, num)  # the score and its gradient in num on c's piece
        p = c.copy()
        p[:, num] = x[:, num]  # the real changes are re-chosen; the others stay
        missing = MARGIN_SCORE - (score + ((x[:, num] - c[:, num]) * w).sum(1))  # score to add on c's piece
        cap = np.where(w > 0, hi[rows][:, num] - x[:, num], np.where(w < 0, x[:, num] - lo[rows][:, num], 0.0))
        gain = np.abs(w) * np.maximum(cap, 0.0)  # score each feature adds moved to its bound
        order = np.argsort(-np.abs(w) * span, axis=1, kind="stable")  # score per unit of normalized distance
        n = len(rows)
        g_sorted = np.take_along_axis(gain, order, 1)
        before = np.cumsum(g_sorted, 1) - g_sorted  # score the features ahead of each one add in full
        target = np.maximum(missing[:, None] * factors[None, :], 0.0)  # (n, F) at each overshoot
        take = np.clip(target[..., None] - before[:, None, :], 0.0, g_sorted[:, None, :])  # (n, F, M) in order
        w_sorted = np.abs(np.take_along_axis(w, order, 1))[:, None, :]
        move_sorted = np.where(w_sorted > 0, take / np.where(w_sorted > 0, w_sorted, 1.0), 0.0)
        move = np.empty_like(move_sorted)
        np.put_along_axis(move, np.broadcast_to(order[:, None, :], move.shape), move_sorted, 2)
        short = target - g_sorted.sum(1)[:, None] > 1e-12 * np.maximum(1.0, np.abs(missing))[:, None]  # no flip in the box
        cand = np.repeat(p[:, None, :], len(factors), axis=1)  # (n, F, D)
        cand[..., num] = np.clip(x[:, None, num] + np.sign(w)[:, None, :] * move, lo[rows][:, None, num],
                                 hi[rows][:, None, num])
        cand[short] = np.nan
        flat = cand.reshape(n * len(factors), -1)
        live = ~np.isnan(flat).any(1)
        ok = np.zeros(len(flat), bool)
        ok[live] = accepts_for(world, geo, np.repeat(x, len(factors), axis=0)[live], flat[live])
        d = np.where(ok, geo.distance(np.repeat(x, len(factors), 0), np.nan_to_num(flat)), np.inf).reshape(n, -1)
        best = d.argmin(1)
        better = d[np.arange(n), best] < geo.distance(x, c) - 1e-12
        if not better.any():
            break
        C[rows[better]] = cand[np.flatnonzero(better), best[better]]
        rows = rows[better]
    return C


def piece_optimum(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, C: np.ndarray, *,
                  beat: np.ndarray | None = None, time_limit: float = 2.0) -> np.ndarray:
    """Each start ``C`` (N, D; NaN: none) of agent ``X`` (N, D) re-chosen as the nearest point of its
    linear piece that clears the margin: its movable numeric columns (integer ones in whole steps)
    minimize the cost-weighted l1 distance subject to every ReLU unit keeping the start's side, the
    piece's score reaching twice the margin (or the start's own score where lower, so an accepted
    start stays feasible), the agent's box and the world's rules (``_rule_rows``); the other columns
    keep the start's values. A start the model rejects (the agent itself: its own piece) gets an
    elastic score row, and is dropped where the piece cannot clear it.

    The starts are blocks of one LP per ``PIECE_CHUNK`` (the relaxation); the blocks whose integer
    columns come out fractional are solved again as a MILP, only where the relaxation's distance (a
    lower bound for an l1 norm) is below ``beat`` (N,; the distance to beat, e.g. the agent's best
    answer). One model call verifies them, and a start is replaced only by an accepted, rule-keeping,
    nearer point. A heuristic beyond the piece, and for a norm with count or max terms (only the l1
    part is the objective)."""
    C = np.array(C, float)
    inputs = _piece_inputs(world, geo, X, C, integers=True)
    if inputs is None:
        return C
    (weights, biases), cols, rows, (lo, hi), span = inputs
    cost = geo.direction_costs[geo.raw_of_column[cols]]
    price = np.concatenate([cost[:, 0] / span, cost[:, 1] / span, [0.0]])  # per unit up, down; the slack below
    price[-1] = 1e6 * price.max()  # dearer than any distance: a slack only where the piece cannot clear the score
    whole = geo.rounded[cols]
    exact = whole & (span <= WHOLE_STEPS)  # integer variables; a wider integer column is rounded after (a step is tiny)
    a, _, g = geo.weights
    l1 = a == 0 and g == 0  # the relaxation's distance bounds the MILP's
    beat = np.full(len(X), np.inf) if beat is None else np.asarray(beat, float)
    Y = C[rows].copy()
    start_ok = np.zeros(len(rows), bool)  # the start itself accepted (else any accepted point is nearer)
    grounded: dict[bytes, tuple] = {}  # each agent's rules grounded once (an agent has several starts)
    for chunk in np.array_split(np.arange(len(rows)), -(-len(rows) // PIECE_CHUNK)):
        x, c = X[rows[chunk]], C[rows[chunk]]
        blocks, upper, accepted = _blocks(geo, weights, biases, x, c, cols, lo[rows[chunk]], hi[rows[chunk]], grounded)
        start_ok[chunk] = accepted
        live = np.flatnonzero([blk is not None for blk in blocks])
        V = _solve(blocks, upper, live, price, None, time_limit)  # (n, K) the changes, NaN: none
        frac = np.abs(V[:, exact] - np.round(V[:, exact])).max(1, initial=0.0) > 1e-6
        if exact.any() and frac.any():
            relaxed = c.copy()  # the start's other changes count too
            relaxed[:, cols] = x[:, cols] + np.nan_to_num(V)
            lower = geo.distance(x, relaxed)
            redo = np.flatnonzero(frac & (~l1 | (lower < beat[rows[chunk]] - 1e-12)))
            V[frac] = np.nan
            if len(redo):
                V[redo] = _solve(blocks, upper, redo, price, exact, time_limit)[redo]
        V[:, exact] = np.round(V[:, exact])
        wide = whole & ~exact  # rounded away from the agent: the side the piece asked for
        V[:, wide] = np.sign(V[:, wide]) * np.ceil(np.abs(V[:, wide]) - 1e-9)
        done = ~np.isnan(V).any(1)
        new = Y[chunk].copy()
        new[:, cols] = np.clip(x[:, cols] + np.nan_to_num(V), lo[rows[chunk]][:, cols], hi[rows[chunk]][:, cols])
        Y[chunk[done]] = new[done]
    start_d = np.where(start_ok, geo.distance(X[rows], C[rows]), np.inf)
    nearer = geo.distance(X[rows], Y) < np.minimum(start_d, np.where(start_ok, np.inf, beat[rows])) - 1e-12
    if nearer.any():
        ok = accepts_for(world, geo, X[rows][nearer], Y[nearer])
        C[rows[np.flatnonzero(nearer)[ok]]] = Y[nearer][ok]
    return C


def _blocks(geo: WorldGeometry, weights: list[np.ndarray], biases: list[np.ndarray], x: np.ndarray, c: np.ndarray,
            cols: np.ndarray, lo: np.ndarray, hi: np.ndarray, grounded: dict[bytes, tuple]
            ) -> tuple[list, np.ndarray, np.ndarray]:
    """Per start, its block ``(A, b)`` over (u, w, s) (the change v = u - w of ``cols``, the score row's
    slack s): every ReLU unit's side, the score, the rules' rows; None where the start breaks a rule.
    With the variables' upper bounds (n, 2K + 1) and whether each start is accepted. ``grounded``: the
    agents' grounded clauses by row bytes (filled here, shared across chunks)."""
    z, J, side, score, grad = _piece_rows(weights, biases, c, cols)
    shift = (x - c)[:, cols]  # the change v from the agent: the start is v = c - x
    accepted = score >= MARGIN_SCORE
    need = np.where(accepted, np.minimum(2 * MARGIN_SCORE, score), 2 * MARGIN_SCORE)
    # per unit: -side * J . v <= side * (z + J . shift); the score: -g . v - s <= score + g . shift - need
    A = np.concatenate([-side[..., None] * J, -grad[:, None, :]], 1)  # (n, H + 1, K) on v
    b = np.concatenate([side * (z + np.einsum("nhk,nk->nh", J, shift)),
                        (score + (grad * shift).sum(1) - need)[:, None]], 1)
    m = A.shape[1]
    blocks = []
    for i in range(len(x)):  # one block per start: its piece rows, its rules' rows
        if geo.gate is not None and x[i].tobytes() not in grounded:
            grounded[x[i].tobytes()] = geo.gate.rules.ground(x[i]).clauses
        R, rb = _rule_rows(geo, grounded.get(x[i].tobytes(), ()), x[i], c[i], cols, lo[i], hi[i])
        if R is None:  # the start breaks a rule: leave it
            blocks.append(None)
            continue
        Ab = np.concatenate([A[i], R], 0)
        full = np.concatenate([Ab, -Ab, np.zeros((len(Ab), 1))], 1)  # v = u - w
        full[m - 1, -1] = -1.0  # the elastic slack of the score row
        blocks.append((full, np.concatenate([b[i], rb])))
    up = np.maximum(hi[:, cols] - x[:, cols], 0.0)
    down = np.maximum(x[:, cols] - lo[:, cols], 0.0)
    return blocks, np.concatenate([up, down, np.where(accepted, 0.0, np.inf)[:, None]], 1), accepted


def _solve(blocks: list, upper: np.ndarray, which: np.ndarray, price: np.ndarray, integer: np.ndarray | None,
           time_limit: float) -> np.ndarray:
    """The blocks ``which`` as one block-diagonal LP (``integer`` None) or MILP (``integer`` (K,): the
    columns in whole steps): (n, K) each start's change v (NaN where not solved, or where the score
    needed its slack: the piece cannot clear it). HiGHS's presolve is off: on these small dense blocks it
    cost more than it saved (one German MLP agent's LP 5.5 -> 1.5 ms, its MILP 9.4 -> 8.2 ms; the same optima)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import block_diag

    n, nv = len(upper), upper.shape[1]
    K = (nv - 1) // 2
    out = np.full((n, K), np.nan)
    if not len(which):
        return out
    A = block_diag([blocks[i][0] for i in which], format="csr")
    rhs = np.concatenate([blocks[i][1] for i in which])
    kinds = np.zeros(nv, int) if integer is None else np.concatenate([integer, integer, [False]]).astype(int)
    res = milp(np.tile(price, len(which)), integrality=np.tile(kinds, len(which)),
               bounds=Bounds(0.0, upper[which].ravel()), constraints=LinearConstraint(A, -np.inf, rhs),
               options={"time_limit": float(time_limit), "presolve": False})
    if res.x is None:  # numerically troubled or out of time without a point
        return out
    sol = res.x.reshape(len(which), nv)
    fine = sol[:, -1] <= 1e-9
    out[which[fine]] = (sol[:, :K] - sol[:, K:2 * K])[fine]
    return out


def _rule_rows(geo: WorldGeometry, clauses: tuple, x: np.ndarray, c: np.ndarray, cols: np.ndarray, lo: np.ndarray,
               hi: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """The world's rules for agent ``x`` as rows ``R v <= r`` over the change ``v`` of the columns ``cols``
    from ``x``, the other columns at the start ``c``'s values: of each of the agent's ``clauses``
    (``envs.rules.ground``) the first disjunct the start keeps, its bound tightened by the checker's
    tolerance but never past the start's own value (the start stays feasible). (None, _) where the
    start keeps no disjunct of a clause."""
    K = len(cols)
    if geo.gate is None:
        return np.zeros((0, K)), np.zeros(0)
    pos = {int(k): p for p, k in enumerate(cols)}
    rows, rhs = [], []
    for clause in clauses:
        held = next((dj for dj in clause.disjuncts
                     if all(sum(a * c[k] for k, a in zip(q.cols, q.coefs, strict=True)) <= q.rhs_for(lo, hi, geo.span)
                            for q in dj)), None)
        if held is None:
            return None, np.zeros(0)
        for q in held:
            moving = [(pos[k], a) for k, a in zip(q.cols, q.coefs, strict=True) if k in pos]
            if not moving:
                continue  # decided by the start's fixed values, which keep it
            row = np.zeros(K)
            for p, a in moving:
                row[p] += a
            at_start = sum(a * c[k] for k, a in zip(q.cols, q.coefs, strict=True))
            bound = max(q.rhs_for(lo, hi, geo.span, margin=0.0), at_start)
            rows.append(row)
            rhs.append(bound - at_start + sum(a * (c[cols[p]] - x[cols[p]]) for p, a in moving))
    return (np.array(rows) if rows else np.zeros((0, K))), np.array(rhs)
