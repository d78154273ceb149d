"""``SetNamer``: which raw features an agent's nearest counterfactual changes, learnt from MACE's labels
(issue 56).

On a forest seen only through ``predict_proba`` the budgeted search fails mostly where round one holds no
accepted row of the optimum's changed set (``benchmarks/forest_round_one.py``), and the proposer's heads,
trained to regress changes, collapse onto the common sets. Given the right set, the values of the nearest
training agents whose answers change exactly that set are a good first guess (a forest's splits are the
same for every agent). So the labels' distinct changed sets are classes, and a multinomial logistic
regression on the scaled agent ranks them; the proposer then proposes, for each of the likeliest few sets,
its nearest training agents' values. A class is a set the labels hold: a set no label changes is never
named (the heads still propose it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.rowwise import rowwise_matmul


@dataclass
class SetNamer:
    """Ranks the labels' changed raw-feature sets for an agent (multinomial logistic regression)."""

    C: float = 3.0  # inverse L2 strength of the logistic regression
    max_iter: int = 3000  # its solver's iterations

    def fit(self, Xs: np.ndarray, changed: np.ndarray) -> SetNamer:
        """``Xs`` (M, D) scaled training agents, ``changed`` (M, J) bool: the raw features each label
        changes. Learns ``keys_`` (S, J) the distinct sets, ``set_of_label_`` (M,) each label's set, and the
        linear scores ``coef_`` (S, D), ``intercept_`` (S,)."""
        from sklearn.linear_model import LogisticRegression

        keys, inv = np.unique(np.asarray(changed, bool), axis=0, return_inverse=True)
        self.keys_, self.set_of_label_ = keys, inv.reshape(-1).astype(np.int64)
        S, D = len(keys), Xs.shape[1]
        self.coef_, self.intercept_ = np.zeros((S, D)), np.zeros(S)
        if S == 2:  # sklearn's binary model scores class 1 only: class 0 scores 0
            lr = LogisticRegression(C=self.C, max_iter=self.max_iter).fit(Xs, self.set_of_label_)
            self.coef_[1], self.intercept_[1] = lr.coef_[0], lr.intercept_[0]
        elif S > 2:
            lr = LogisticRegression(C=self.C, max_iter=self.max_iter).fit(Xs, self.set_of_label_)
            self.coef_, self.intercept_ = lr.coef_.astype(float), lr.intercept_.astype(float)
        return self

    def scores(self, Xs: np.ndarray) -> np.ndarray:
        """(N, S) the linear score of each set per scaled agent, each agent's row alone (the same bits in any
        batch: a near tie must not rank the sets one way in a request and the other in a batch)."""
        return rowwise_matmul(np.asarray(Xs, float), np.ascontiguousarray(self.coef_.T)) + self.intercept_

    def rank(self, Xs: np.ndarray, k: int) -> np.ndarray:
        """(N, min(k, S)) set indices per scaled agent, likeliest first (ties in index order)."""
        return np.argsort(-self.scores(Xs), axis=1, kind="stable")[:, :min(int(k), len(self.keys_))]

    def arrays(self) -> dict[str, np.ndarray]:
        return {"set_keys": self.keys_, "set_of_label": self.set_of_label_, "set_coef": self.coef_,
                "set_intercept": self.intercept_}

    @classmethod
    def from_arrays(cls, z: dict[str, np.ndarray]) -> SetNamer:
        namer = cls()
        namer.keys_ = np.asarray(z["set_keys"], bool)
        namer.set_of_label_ = np.asarray(z["set_of_label"], np.int64)
        namer.coef_, namer.intercept_ = np.asarray(z["set_coef"], float), np.asarray(z["set_intercept"], float)
        return namer
