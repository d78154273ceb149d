"""``named_cfe``: a named-CFE classifier (learners.named_cfe, the learning-CFE paper's MC model)
over the set of raw features MACE changed; for each of its top classes, the nearest training
agents with that class lend their values."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.tabular import TabularWorld
from learners.tabular.base import TabularGenerator, TabularLabels
from learners.tabular.geometry import WorldGeometry


@dataclass
class NamedCfeTabularParams:
    """Hyperparameters of the named-CFE tabular generator (classifier: learners.named_cfe's MLP)."""

    top_classes: int = 5  # classifier's top classes tried per agent (2 candidates each)
    neighbours_per_class: int = 2  # nearest training agents of each class that lend their values
    knn_candidates: int = 0  # extra plain nearest-neighbour donors (0: the network's answer alone)
    polish_rounds: int = 4  # polish search rounds per column (half as many on the joint scale; a forest: one round of the joint scale, then its exact split sweep; -1: no polish)
    polish_probes: int = 15  # points probed per column and round (resolution 16**-rounds of the change)
    polish_top: int = 4  # nearest accepted candidates polished per agent (the nearest after polish wins)
    hidden: tuple[int, ...] = (256, 256)  # classifier MLP widths
    max_epochs: int = 60  # classifier training epochs
    batch_size: int = 128  # classifier batch size
    lr: float = 3e-3  # classifier peak learning rate
    dropout: float = 0.1  # classifier dropout

    def __post_init__(self) -> None:
        self.hidden = tuple(int(h) for h in self.hidden)
        for name in ("top_classes", "neighbours_per_class"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")


class NamedCfeTabularGenerator(TabularGenerator):
    """Which features to change from a named-CFE classifier; their values from the nearest agents
    whose MACE answer changed the same features."""

    method = "named_cfe"
    Params = NamedCfeTabularParams

    def _classifier(self):
        from learners.named_cfe import NamedCfeGenerator

        p = self.params
        return NamedCfeGenerator(hidden=p.hidden, max_epochs=p.max_epochs, batch_size=p.batch_size, lr=p.lr,
                                 dropout=p.dropout, patience=max(10, p.max_epochs // 4))

    def _sets(self) -> np.ndarray:
        ids = np.where(self.changed_, np.arange(self.changed_.shape[1]), np.iinfo(np.int64).max)
        width = max(1, int(self.changed_.sum(1).max(initial=0)))
        ids = np.sort(ids, axis=1)[:, :width]
        return np.where(ids == np.iinfo(np.int64).max, -1, ids)

    def fit(self, world: TabularWorld, labels: TabularLabels, *, seed: int = 0, progress: bool = False
            ) -> NamedCfeTabularGenerator:
        from data_gen.dataset import Split
        from data_gen.encodings import CfeVocabulary
        from learners.base import FitContext

        self._store(world, labels)
        sets = self._sets()
        J = self.changed_.shape[1]
        vocab = CfeVocabulary(sets, [f"change_{j}" for j in range(J)])
        split = Split(X=self._scaled(self.X_), groups=np.zeros(len(sets), np.int64), sets=sets,
                      cost=np.asarray(labels.distance, float), class_ids=vocab.encode(sets),
                      runtime=np.zeros(len(sets)))
        ctx = FitContext(n_features=self.n_columns_, n_actions=J, max_len=sets.shape[1], seed=seed,
                         progress=progress)
        self.clf_ = self._classifier().fit(split, None, ctx)
        if not np.array_equal(self.clf_.classes_, vocab.sets_):  # the classifier numbers classes as vocab does
            raise RuntimeError("named_cfe: classifier classes differ from the label vocabulary")
        self.train_class_ = vocab.encode(sets)
        return self

    def candidates(self, world: TabularWorld, X: np.ndarray) -> np.ndarray:
        p = self.params
        geo = WorldGeometry.of(world)
        P = self.clf_.predict_proba(self._scaled(X))
        m = min(int(p.top_classes), P.shape[1])
        top = np.argsort(-P, axis=1)[:, :m]  # (N, m)
        d = self._train_distances(X)  # (N, M)
        q = int(p.neighbours_per_class)
        donors = []
        for r in range(m):  # nearest training agents of the r-th class of each agent
            dm = np.where(self.train_class_[None, :] == top[:, r:r + 1], d, np.inf)
            kk = min(q, dm.shape[1])
            idx = np.argpartition(dm, kk - 1, axis=1)[:, :kk]
            idx = np.take_along_axis(idx, np.argsort(np.take_along_axis(dm, idx, 1), 1), 1)
            has = np.isfinite(np.take_along_axis(dm, idx, 1))
            idx = np.where(has, idx, np.argmin(d, axis=1)[:, None])  # a class with no member left: nearest agent
            donors.append(idx)
        if p.knn_candidates > 0:
            donors.append(self._neighbours(X, int(p.knn_candidates), d=d))
        return self._lend(geo, X, np.concatenate(donors, axis=1))

    def _save_extra(self, path: Path) -> dict[str, Any]:
        self.clf_.save(path / "classifier")
        np.savez(path / "train_class.npz", train_class=self.train_class_)
        return {}

    def _load_extra(self, path: Path, meta: dict[str, Any]) -> None:
        from learners.named_cfe import NamedCfeGenerator

        self.clf_ = NamedCfeGenerator.load(path / "classifier")
        with np.load(path / "train_class.npz", allow_pickle=False) as z:
            self.train_class_ = z["train_class"]
