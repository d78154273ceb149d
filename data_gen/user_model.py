"""A user's own fitted model: loaded safely, translated into a white box over the world, checked.

``load_model(path, trusted=False)`` reads ``.skops`` (skops.io; types skops does not trust are
refused, listed, unless ``trusted``), ``.joblib`` / ``.pkl`` (only with ``trusted``: unpickling runs
code), XGBoost ``.json`` / ``.ubj`` (an ``XGBClassifier``) and LightGBM ``.txt`` (a ``Booster``,
seen as a classifier by :class:`LightGBMBooster`). Every failure is one line naming the file.

``translate(model, spec, encoder)`` walks the model (``data_gen.pipeline_map``) and returns the
white box over the world's encoded rows, the ``InputMap`` and a :class:`TranslationReport`:
LogisticRegression and ReLU MLPClassifier fold the preprocessing's affine map into
``envs.models.LinearModel`` / ``MLPModel``; the tree families go to ``envs.imported_trees``;
anything else takes the black-box route (GeCo / MD-PSO, answers not certified), the report naming
the step or estimator. A multi-class model, or one whose ``feature_names_in_`` differ from the
table's feature columns, is an error.

``check_agreement`` scores the table with the user's model (on the raw frame, its own dtypes) and
with the world (encoded rows and the white box, or the oracle on decoded records) and stops at the
first row where they disagree. :class:`UserModelOracle` is the user's model as a verifier of
encoded rows.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from data_gen.pipeline_map import Unsupported, final_estimator, finish, input_map, walk, world_layout
from data_gen.spec import DataSpec, match_value
from data_gen.tabular_encoder import RawColumn, TabularEncoder, _plain
from envs.input_map import InputMap
from envs.models import LinearModel, MLPModel, WhiteBoxModel

BLACK_BOX = "black-box route: GeCo / MD-PSO, answers not certified"
TREE_MODELS = ("DecisionTreeClassifier", "RandomForestClassifier", "ExtraTreesClassifier",
               "GradientBoostingClassifier", "HistGradientBoostingClassifier", "XGBClassifier", "LGBMClassifier",
               "LightGBMBooster", "Booster")
WHITE_BOX_MODELS = ("LogisticRegression", "MLPClassifier", *TREE_MODELS)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _package(module: str, what: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"model: {what} needs {module.split('.')[0]}, which is not installed "
                         f"(pip install {module.split('.')[0]})") from None


# ------------------------------------------------------------------------------------------ loading

class LightGBMBooster:
    """A binary LightGBM ``Booster`` (from its text file) as a classifier with classes 0 and 1."""

    def __init__(self, booster: Any):
        self.booster_ = booster  # the Booster itself (what envs.imported_trees reads)
        self.classes_ = np.array([0, 1])
        self.n_features_in_ = int(booster.num_feature())
        names = list(booster.feature_name())
        if names != [f"Column_{i}" for i in range(len(names))]:  # LightGBM's names for an unnamed array
            self.feature_names_in_ = np.array(names, dtype=object)

    def predict_proba(self, X: Any) -> np.ndarray:
        p = np.asarray(self.booster_.predict(X), np.float64)
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        p = self.predict_proba(X)
        return self.classes_[np.argmax(p, axis=1)]


def load_model(path: str | Path, *, trusted: bool = False) -> Any:
    """A fitted model from ``path`` (see the module's docstring); ``trusted``: the user vouches for
    the file's source (pickles; types skops does not trust)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"model: {p} is not a file")
    suffix = p.suffix.lower()
    if suffix == ".skops":
        sio = _package("skops.io", "a .skops file")
        try:
            untrusted = sio.get_untrusted_types(file=p)
        except Exception as err:  # a damaged zip, a missing schema: one line
            raise ValueError(f"model: cannot read {p} as a .skops file ({_first_line(err)})") from None
        if untrusted and not trusted:
            raise ValueError(f"model: {p} holds types skops does not trust: {', '.join(untrusted)} "
                             "(check them, then set trusted: true to load it)")
        try:
            return sio.load(p, trusted=untrusted or None)
        except Exception as err:
            raise ValueError(f"model: cannot load {p} ({_first_line(err)})") from None
    if suffix in (".joblib", ".pkl", ".pickle"):
        if not trusted:
            raise ValueError(f"model: {p} is a pickle, and unpickling runs code from the file; set trusted: true "
                             "only if you trust its source (or save the model with skops)")
        joblib = _package("joblib", "a pickled model")
        try:
            return joblib.load(p)
        except Exception as err:
            raise ValueError(f"model: cannot unpickle {p} ({_first_line(err)})") from None
    if suffix in (".json", ".ubj"):
        xgb = _package("xgboost", "an XGBoost model")
        model = xgb.XGBClassifier()
        try:
            model.load_model(p)
        except Exception as err:
            raise ValueError(f"model: cannot read {p} as an XGBoost model ({_first_line(err)})") from None
        objective = str(model.get_xgb_params().get("objective"))
        if objective.startswith("multi:"):
            raise ValueError(f"model: {p} is a multi-class XGBoost model ({objective}); recourse needs a binary one")
        if not objective.startswith("binary:"):
            raise ValueError(f"model: {p}: XGBoost objective {objective!r} is not a binary classifier")
        return model
    if suffix == ".txt":
        lgb = _package("lightgbm", "a LightGBM model")
        try:
            booster = lgb.Booster(model_file=str(p))
            objective = str(booster.dump_model().get("objective", ""))
        except Exception as err:
            raise ValueError(f"model: cannot read {p} as a LightGBM model ({_first_line(err)})") from None
        if objective.startswith(("multiclass", "multiclassova")):
            raise ValueError(f"model: {p} is a multi-class LightGBM model ({objective}); recourse needs a binary one")
        if not objective.startswith(("binary", "cross_entropy")):
            raise ValueError(f"model: {p}: LightGBM objective {objective!r} is not a binary classifier")
        return LightGBMBooster(booster)
    raise ValueError(f"model: {p}: unknown format {suffix!r} (.skops; .joblib/.pkl with trusted: true; XGBoost "
                     ".json/.ubj; LightGBM .txt)")


# -------------------------------------------------------------------------------------- the model

def favourable_index(model: Any, favourable: Any) -> tuple[int, str]:
    """(the favourable class's column in ``predict_proba``, a note); one line for a model that is not a
    binary classifier or whose classes lack the favourable value."""
    classes = getattr(model, "classes_", None)
    if classes is None:
        if not callable(getattr(model, "predict_proba", None)):
            raise ValueError(f"model: {type(model).__name__} has neither classes_ nor predict_proba (wrap it in a "
                             "class whose predict_proba(DataFrame) gives P(class 0), P(class 1))")
        return 1, f"{type(model).__name__} has no classes_: predict_proba's second column is taken as favourable"
    classes = [_plain(c) for c in classes]
    if len(classes) != 2:
        raise ValueError(f"model: a multi-class model (classes {classes}); recourse needs a binary classifier")
    fav = match_value(favourable, classes)
    if fav in classes:
        return classes.index(fav), ""
    if set(classes) <= {0, 1}:  # trained on 0/1 labels (XGBoost, LightGBM always are): 1 is the good one
        return classes.index(1), f"the model's classes are {classes}: 1 is taken as the favourable {favourable!r}"
    raise ValueError(f"model: its classes {classes} do not include the favourable value {favourable!r}")


def model_columns(model: Any, spec: DataSpec) -> tuple[list[str], bool]:
    """(the columns the model reads, in its order; does it take a DataFrame). One line where its
    ``feature_names_in_`` differ from the table's feature columns. An estimator fitted on an array
    (``n_features_in_``, no names) reads the spec's features in order, as an array; a model that says
    neither (a wrapper) gets the table's DataFrame."""
    names = getattr(model, "feature_names_in_", None)
    if names is None:
        n = getattr(model, "n_features_in_", None)
        if n is not None and n != len(spec.names):
            raise ValueError(f"model: reads {n} columns, the table has {len(spec.names)} features {spec.names}")
        return list(spec.names), n is None
    names = [str(n) for n in names]
    lacks = [n for n in spec.names if n not in names]
    unknown = [n for n in names if n not in spec.names]
    if lacks or unknown:
        raise ValueError(f"model: its feature_names_in_ differ from the table's feature columns: the model lacks "
                         f"{lacks} (list them under ignore in the spec), the table lacks {unknown}")
    return names, True


def world_columns(model: Any, spec: DataSpec, df: pd.DataFrame) -> tuple[RawColumn, ...]:
    """The encoder's raw columns for ``model``: each feature stored as the model reads it (one-hot,
    code or number; ``pipeline_map.world_layout``), the spec's default where the walk cannot follow."""
    names, _ = model_columns(model, spec)
    try:
        _, cols, _ = walk(model, names)
        one_hot, code = world_layout(finish(cols, spec), spec, df)
    except Unsupported:
        one_hot, code = {}, {}
    return spec.to_raw_columns(one_hot=one_hot, code=code)


@dataclass
class TranslationReport:
    """How the user's model entered the world: the route, what was walked, and why not white-box."""

    route: str  # "white-box" (MACE certifies answers) or "black-box" (GeCo / MD-PSO)
    estimator: str  # the final estimator's class
    steps: tuple[str, ...] = ()  # the preprocessing steps walked, in order
    white_box: str = ""  # the white box's class
    reason: str = ""  # black-box: the unsupported step or estimator
    notes: tuple[str, ...] = ()
    favourable_index: int = 1
    n_inputs: int = 0  # the final estimator's input columns

    def __str__(self) -> str:
        if self.route == "black-box":
            return f"{BLACK_BOX} ({self.reason})"
        chain = " -> ".join([*self.steps, self.estimator])
        return f"white-box route: {chain} as {self.white_box} over the world's encoded rows (MACE certified)"


def translate(model: Any, spec: DataSpec, encoder: TabularEncoder) -> tuple[WhiteBoxModel | None, InputMap | None,
                                                                             TranslationReport]:
    """(white box or None, the InputMap or None where the preprocessing could not be followed, report)."""
    pos, note = favourable_index(model, spec.favourable)
    names, _ = model_columns(model, spec)
    notes = (note,) if note else ()
    est, steps = final_estimator(model), ()
    try:
        est, cols, steps = walk(model, names)
        steps = tuple(steps)
        if type(est).__name__ not in WHITE_BOX_MODELS:
            raise Unsupported(f"estimator {type(est).__name__} has no white-box translation")
        cols = finish(cols, spec)
        world_layout(cols, spec)  # a feature the world cannot store as the model reads it
        imap, not_affine = input_map(cols, encoder)
        n = getattr(est, "n_features_in_", None)
        if n is not None and n != len(cols):
            raise Unsupported(f"the estimator reads {n} columns, the preprocessing gives {len(cols)}")
    except Unsupported as why:
        return None, None, TranslationReport("black-box", type(est).__name__, steps, reason=str(why), notes=notes,
                                             favourable_index=pos)
    kind = type(est).__name__
    report = TranslationReport("white-box", kind, steps, notes=notes, favourable_index=pos, n_inputs=len(cols))
    try:
        white = _white_box(est, kind, imap, pos, not_affine)
    except Unsupported as why:
        report.route, report.reason = "black-box", str(why)
        return None, imap, report
    report.white_box = type(white).__name__
    return white, imap, report


def _white_box(est: Any, kind: str, imap: InputMap, pos: int, not_affine: list[str]) -> WhiteBoxModel:
    if kind in ("LogisticRegression", "MLPClassifier"):
        if not_affine:
            raise Unsupported(f"{kind}: input columns {not_affine} are not affine in the world's columns "
                              "(uneven level values, or a scaler's clip within the range)")
        A, s = imap.affine()
        if kind == "LogisticRegression":
            w, b = np.asarray(est.coef_, float).reshape(-1), float(np.asarray(est.intercept_).reshape(-1)[0])
            sign = 1.0 if pos == 1 else -1.0
            return LinearModel(sign * (A @ w), sign * float(s @ w + b))
        if est.activation != "relu":
            raise Unsupported(f"MLPClassifier: activation {est.activation!r} (MACE's MLP formula needs 'relu')")
        W = [np.asarray(x, float).copy() for x in est.coefs_]
        c = [np.asarray(x, float).copy() for x in est.intercepts_]
        c[0], W[0] = s @ W[0] + c[0], A @ W[0]
        if pos == 0:
            W[-1], c[-1] = -W[-1], -c[-1]
        return MLPModel(W, c)
    try:  # the tree families (TREE_MODELS)
        from envs import imported_trees
    except ImportError:
        raise Unsupported(f"{kind}: the tree translator (envs.imported_trees) is not installed") from None
    native = getattr(est, "booster_", est) if kind == "LightGBMBooster" else est
    positive = _plain(est.classes_[pos]) if hasattr(est, "classes_") else 1
    try:
        return imported_trees.from_fitted(native, imap, positive=positive)
    except (ValueError, NotImplementedError) as err:
        raise Unsupported(f"{kind}: {_first_line(err)}") from None


# ------------------------------------------------------------------------------------- the oracle

@dataclass
class UserModelOracle:
    """The user's model as a verifier: encoded rows -> raw records with the table's dtypes
    (``encoder.decode``) -> the model's decision (True: the favourable class), in batches."""

    model: Any
    encoder: TabularEncoder
    columns: tuple[str, ...]  # the model's input columns, in its order
    dtypes: dict[str, Any]  # the table's dtype of each column
    positive: int  # the favourable class's column of predict_proba / index in classes_
    named: bool = True  # fitted on a DataFrame (else it is given an array)
    batch: int = 8192  # rows per model call

    @classmethod
    def build(cls, model: Any, spec: DataSpec, encoder: TabularEncoder, df: pd.DataFrame) -> UserModelOracle:
        """The oracle of ``model`` for the table ``df`` (its dtypes) and the world's ``encoder``."""
        pos, _ = favourable_index(model, spec.favourable)
        names, named = model_columns(model, spec)
        return cls(model, encoder, tuple(names), {n: df[n].dtype for n in names}, pos, named)

    def frame(self, X: np.ndarray) -> pd.DataFrame:
        """Encoded rows as raw records, in the model's column order and the table's dtypes."""
        raw = self.encoder.decode(X)
        out = {}
        for n in self.columns:
            col, dtype = raw[n], self.dtypes[n]
            if pd.api.types.is_integer_dtype(dtype) and not np.all(np.mod(col.to_numpy(float), 1) == 0):
                out[n] = col.astype(np.float64)  # a fractional answer stays a number (the model takes floats)
            else:
                out[n] = col.astype(dtype)
        return pd.DataFrame(out)

    def _inputs(self, X: np.ndarray) -> Any:
        df = self.frame(X)
        return df if self.named else df.to_numpy()

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(favourable) per encoded row (a model without ``predict_proba``: its decision as 0 or 1)."""
        X = np.atleast_2d(np.asarray(X, float))
        if not hasattr(self.model, "predict_proba"):
            return self(X).astype(np.float64)
        parts = [np.asarray(self.model.predict_proba(self._inputs(X[i:i + self.batch])), float)[:, self.positive]
                 for i in range(0, len(X), self.batch)]
        return np.concatenate(parts) if parts else np.zeros(0)

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """Acceptance per encoded row: the model's own ``predict`` is the favourable class."""
        X = np.atleast_2d(np.asarray(X, float))
        parts = [decisions(self.model, self._inputs(X[i:i + self.batch]), self.positive)
                 for i in range(0, len(X), self.batch)]
        return np.concatenate(parts) if parts else np.zeros(0, bool)


def decisions(model: Any, X: Any, positive: int) -> np.ndarray:
    """The model's decision per row: its ``predict`` (or predict_proba's argmax) is the favourable class."""
    if callable(getattr(model, "predict", None)) and hasattr(model, "classes_"):
        label = _plain(model.classes_[positive])
        return np.array([_plain(v) == label for v in np.asarray(model.predict(X)).ravel()], bool)
    p = np.asarray(model.predict_proba(X), float)
    return np.argmax(p, axis=1) == positive


class BlackBoxModel(WhiteBoxModel):
    """The user's model in a world that has no white box of it (the black-box route): scores come from
    the oracle (P(favourable) - 0.5, positive exactly where the model accepts). MACE cannot read it;
    GeCo and MD-PSO can. It is not stored as JSON: a run keeps the user's model file."""

    kind: ClassVar[str] = "user_black_box"

    def __init__(self, oracle: UserModelOracle):
        self.oracle = oracle
        self.n_features = len(oracle.encoder.schema)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.oracle.predict_proba(self._check(X))

    def score(self, X: np.ndarray) -> np.ndarray:
        X = self._check(X)
        s = self.predict_proba(X) - 0.5
        accept = self.oracle(X)
        return np.where(accept, np.maximum(s, np.finfo(float).tiny), np.minimum(s, 0.0))

    def to_dict(self) -> dict[str, Any]:
        raise ValueError("model: a black-box user model is stored as the user's model file, not as JSON")


# ---------------------------------------------------------------------------------------- agreement

@dataclass
class AgreementReport:
    """What ``check_agreement`` found: rows scored, rows near the boundary that differ, the largest gap."""

    rows: int
    boundary: int = 0  # rows within the margin of the decision boundary whose decisions differ (allowed)
    max_proba_gap: float = 0.0
    accuracy: float | None = None  # the user's model against the table's labels, where given
    notes: list[str] = field(default_factory=list)


def check_agreement(model: Any, white_box: WhiteBoxModel | None, input_map: InputMap | None, spec: DataSpec,
                    encoder: TabularEncoder, df: pd.DataFrame, *, atol: float = 1e-6,
                    margin: float = 1e-9) -> AgreementReport:
    """Score ``df``'s rows with the user's model (the raw frame) and with the world (the white box on the
    encoded rows; without one, the oracle on the decoded records) and raise one line naming the first
    row where the decisions differ or P(favourable) differs by more than ``atol`` (plus the white box's
    own ``tolerance``). Rows whose decisions differ within ``margin`` of P = 0.5 (or within the white
    box's tolerance of score 0) are counted, not errors."""
    pos, _ = favourable_index(model, spec.favourable)
    names, named = model_columns(model, spec)
    raw = df[names]
    inputs = raw if named else raw.to_numpy()
    try:
        p_user = np.asarray(model.predict_proba(inputs), float)[:, pos] if hasattr(model, "predict_proba") else None
        d_user = decisions(model, inputs, pos)
    except Exception as err:  # the model's own complaint (an unknown category, say), in one line
        raise ValueError(f"agreement: the model cannot score the table ({_first_line(err)})") from None
    X = encoder.encode(df[spec.names])
    if input_map is not None and input_map.n_encoded != X.shape[1]:
        raise ValueError(f"input_map: reads {input_map.n_encoded} encoded columns, the encoder gives {X.shape[1]}")
    tol = float(getattr(white_box, "tolerance", 0.0) or 0.0)
    if white_box is None:
        oracle = UserModelOracle.build(model, spec, encoder, df)
        p_world = oracle.predict_proba(X) if p_user is not None else None
        d_world, s_world = oracle(X), None
        what = "the world's records"
    else:
        s_world = white_box.score(X)
        d_world = s_world > 0
        p_world = _proba(white_box, X)
        what = f"the white box ({type(white_box).__name__})"
    near = np.zeros(len(X), bool)
    for p in (p_user, p_world):
        if p is not None:
            near |= np.abs(p - 0.5) <= margin
    if s_world is not None:
        near |= np.abs(s_world) <= tol
    differ = d_user != d_world
    both = p_user is not None and p_world is not None
    gap = np.abs(p_user - p_world) if both else np.zeros(len(X))
    bad = (differ & ~near) | (gap > atol + tol)
    if bad.any():
        r = int(np.argmax(bad))
        pu, pw = ("n/a" if p is None else f"{p[r]:.9g}" for p in (p_user, p_world))
        raise ValueError(f"agreement: row {df.index[r]}: the model gives P(favourable) = {pu} "
                         f"({'accept' if d_user[r] else 'reject'}), {what} {pw} "
                         f"({'accept' if d_world[r] else 'reject'}); the translation is wrong for this model")
    report = AgreementReport(len(X), int((differ & near).sum()), float(gap.max()) if len(gap) else 0.0)
    if spec.target in df.columns:
        fav = match_value(spec.favourable, list(pd.unique(df[spec.target].map(_plain))))
        y = (df[spec.target].map(_plain) == fav).to_numpy()
        report.accuracy = float(np.mean(d_user == y))
        if report.accuracy < 0.5:
            report.notes.append(f"the model agrees with the labels on only {report.accuracy:.0%} of the rows: is "
                                f"{spec.favourable!r} its favourable class?")
    return report


def _proba(white_box: WhiteBoxModel, X: np.ndarray) -> np.ndarray | None:
    try:
        return np.asarray(white_box.predict_proba(X), float)
    except NotImplementedError:
        return None
