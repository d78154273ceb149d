"""Self-labelling: the user's own rejected rows that MACE never answered, answered at fit time by the
generator's budgeted search at a wide budget through the model alone (issue 56).

MACE's labels are dear (a MILP per agent), so a fit learns from a few hundred; a user holds many more
rejected rows. The proposer's search at 8 x 2,000 answers them within 1% of MACE for most (Credit forest:
.95 of 1,500 real rejected training rows), through ``predict_proba`` only, at a cost counted in model calls and
rows (``fit_info_["self_labels"]``). Its accepted answers join the labels that name the changed sets and lend
the donors' values, and the network is trained again on them all. The value vocabulary stays MACE's (a
vocabulary widened by the search's own values spreads round one thinner).

Real rows, not drawn ones: agents drawn around the labelled ones crowd the real ones out as neighbours (500
MACE labels plus 2,000 drawn agents: Credit forest .81 -> .74 at 2 x 256, ``benchmarks/dense_labels.py``);
real rows are the agents the generator will be asked about.

``answer_unlabelled`` answers in blocks of ``BLOCK`` agents (an answer does not depend on its batch), each
block written whole as it finishes (``data_gen.compute.run_chunks``, on ``n_workers`` processes): an
interrupted fit given the same ``memory`` directory asks only the blocks it lacks.
"""

from __future__ import annotations

import copy
import hashlib
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from data_gen.compute import ComputeConfig, chunk_path, finished_chunks, load_chunk, run_chunks
from envs.black_box import BlackBoxModel, Budget

BLOCK = 125  # agents answered per chunk (the unit a resumed fit keeps)


def _answer_block(shared: tuple[Any, Any, Budget], agents: np.ndarray) -> dict[str, np.ndarray]:
    """One chunk: ``agents`` answered by the generator within the budget, through a counted black box."""
    gen, world, budget = shared
    bb = BlackBoxModel(world.model)
    with bb.budget(budget, agents=len(agents)):
        rec = gen.recommend_within(replace(world, model=bb), agents, budget)
    return {"CF": np.asarray(rec.CF, float), "found": np.asarray(rec.found, bool),
            "calls": np.array([bb.calls]), "rows": np.array([bb.rows])}


def portable(gen: Any) -> Any:
    """A shallow copy of ``gen`` that pickles to worker processes: a torch network as its numpy layers, which
    is all answering reads (``_numpy_net``), not the module (a class local to its builder)."""
    if getattr(gen, "net_", None) is None or not hasattr(gen, "_numpy_net"):
        return gen
    gen._numpy_net()  # its numpy layers, cached on the generator (and so on the copy)
    lean = copy.copy(gen)
    del lean.net_
    return lean


def digest(agents: np.ndarray, budget: Budget, state: bytes) -> str:
    """The key of a self-labelling run: its agents, its budget and the fitted state that answers them."""
    h = hashlib.sha256(np.ascontiguousarray(agents, float).tobytes())
    h.update(f"{int(budget.calls)}x{int(budget.rows)}".encode())
    h.update(state)
    return h.hexdigest()[:24]


def answer_unlabelled(gen: Any, world: Any, agents: np.ndarray, budget: Budget, *, state: bytes = b"",
                      memory: str | Path | None = None, n_workers: int = 1, progress: bool = False
                      ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(CF (U, D), found (U,), info) ``gen``'s answers to ``agents`` within ``budget`` each, through
    ``world.model.predict_proba`` only. ``memory``: a directory keeping each block's answers (under a digest of
    the agents, the budget and ``state``, the fitted state that answers); a rerun answers only the blocks it
    lacks. ``info``: agents, answered, the budget, calls and rows this run asked (not the kept blocks'; the
    check of kept ones included), kept blocks, seconds."""
    agents = np.atleast_2d(np.asarray(agents, float))
    if memory is None:
        with tempfile.TemporaryDirectory() as tmp:
            return answer_unlabelled(gen, world, agents, budget, state=state, memory=tmp, n_workers=n_workers,
                                     progress=progress)
    t0 = time.perf_counter()
    blocks = [agents[i:i + BLOCK] for i in range(0, len(agents), BLOCK)]
    work = Path(memory) / f"self_labels_{digest(agents, budget, state)}"
    kept = finished_chunks(work, len(blocks))
    check = (0, 0)  # the check's call and rows
    if kept:  # a resumed fit: the kept answers must be this model's (one call: each found answer accepted)
        first = load_chunk(chunk_path(work, kept[0]))
        CF = first["CF"][first["found"]]
        check = (1, len(CF)) if len(CF) else (0, 0)
        cut = float(getattr(world.model, "threshold", 0.5))  # accepted iff P(accept) > the model's threshold
        if len(CF) and not bool(np.all(np.asarray(world.model.predict_proba(CF)) > cut)):
            raise ValueError(f"memory: the self-labels kept in {memory} are not this model's (use a directory per model)")
    shared = (portable(gen) if int(n_workers) > 1 else gen, world, budget)
    out = run_chunks(_answer_block, shared, blocks, work, sizes=[len(b) for b in blocks],
                     compute=ComputeConfig(n_workers=max(1, int(n_workers))), desc="self-labels: agents answered",
                     progress=progress)
    CF = np.concatenate([o["CF"] for o in out]) if out else np.zeros((0, agents.shape[1]))
    found = np.concatenate([o["found"] for o in out]) if out else np.zeros(0, bool)
    was_kept = set(kept)
    now = [o for i, o in enumerate(out) if i not in was_kept]  # the blocks this run asked about
    info = {"agents": int(len(agents)), "answered": int(found.sum()), "budget": [int(budget.calls), int(budget.rows)],
            "calls": check[0] + int(sum(int(o["calls"][0]) for o in now)),
            "rows": check[1] + int(sum(int(o["rows"][0]) for o in now)),
            "kept_blocks": len(kept), "seconds": time.perf_counter() - t0}
    return CF, found, info
