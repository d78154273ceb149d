"""A user's table (and model) as a TabularWorld: one call from a CSV/Parquet file or a DataFrame.

``build_user_world(table, target=..., favourable=..., spec=..., model_path=...)`` reads the table,
merges the user's spec over the inferred one (``data_gen.spec``), drops rows with a missing value
(one warning), and then either

- takes the user's fitted model (``model_path`` or ``model``; ``data_gen.user_model``): the world
  stores each feature as the model reads it, the model is translated into a white box (or takes the
  black-box route, its report says why) and checked row by row against the table before anything
  else runs; or
- trains one of the project's own classifiers (``model_class``, as ``data_gen.classifiers`` does
  for the bundled data sets) on the spec's encoding.

The world carries the spec's rules (``rules:`` and the features' weights; ``envs.rules``).

The bundled data sets go through the same spec path: ``spec_from_dataset(name).to_raw_columns()``
are the raw columns ``data_gen.loaders`` encodes them with.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from data_gen.classifiers import train_model
from data_gen.loaders import TabularData
from data_gen.spec import DataSpec, drop_missing, load_spec, read_table
from data_gen.spec_rules import spec_rules
from data_gen.tabular_encoder import TabularEncoder
from data_gen.user_model import (
    AgreementReport,
    BlackBoxModel,
    TranslationReport,
    UserModelOracle,
    check_agreement,
    load_model,
    translate,
    world_columns,
)
from envs.input_map import InputMap
from envs.models import WhiteBoxModel
from envs.tabular import TabularWorld


@dataclass
class UserModelBundle:
    """Everything ``build_user_world`` made besides the world: the spec, the data, the model's route."""

    spec: DataSpec
    data: TabularData  # the encoded table, split 80/20 by the seed (stratified where it can be)
    report: TranslationReport  # the route: white-box (MACE certified) or black-box (GeCo / MD-PSO)
    white_box: WhiteBoxModel | None  # None: the black-box route
    input_map: InputMap | None = None  # how the user's model reads the encoded rows (None: its own model)
    agreement: AgreementReport | None = None  # the row-by-row check against the user's model
    model: Any = None  # the user's fitted model (None: the project's own classifier)
    oracle: UserModelOracle | None = None  # the user's model as a verifier of encoded rows
    metrics: dict[str, Any] = field(default_factory=dict)  # the project classifier's training metrics

    @property
    def encoder(self) -> TabularEncoder:
        return self.data.encoder


def build_user_world(table: str | Path | pd.DataFrame, *, spec: str | Path | dict | DataSpec | None = None,
                     target: str | None = None, favourable: Any = None, model_path: str | Path | None = None,
                     trusted: bool = False, model: Any = None, model_class: str = "forest", seed: int = 0,
                     name: str = "user", test_size: float = 0.2) -> tuple[TabularWorld, UserModelBundle]:
    """The world of a user's table and model (see the module's docstring).

    ``table``: a CSV/Parquet path or a DataFrame. ``spec``: a YAML path, a dict or a DataSpec merged
    over the inferred spec (None: all inferred). ``target``/``favourable``: win over the spec's.
    ``model_path`` / ``model``: the user's fitted model (``trusted`` as ``load_model``); neither:
    train ``model_class`` (tree, forest, lr, mlp) with ``seed``. ``name`` names the world.
    """
    df = table if isinstance(table, pd.DataFrame) else read_table(table)
    spec = load_spec(spec, df, target=target, favourable=favourable)
    df = drop_missing(df, [*spec.names, spec.target])  # one warning with the count
    X_df, y = spec.clean(df)
    if model is None and model_path is not None:
        model = load_model(model_path, trusted=trusted)
    if model is None:
        encoder = TabularEncoder.fit(spec.to_raw_columns(), X_df)
        data = _split(encoder, X_df, y, seed, test_size)
        white, metrics = train_model(model_class, data, seed=seed)
        report = TranslationReport("white-box", f"{model_class} (the project's own)", white_box=type(white).__name__,
                                   n_inputs=len(encoder.schema))
        bundle = UserModelBundle(spec, data, report, white, metrics=metrics)
        return TabularWorld(f"{name}/{model_class}", encoder.schema, white, encoder, spec_rules(spec) or None), bundle
    encoder = TabularEncoder.fit(world_columns(model, spec, X_df), X_df)
    white, imap, report = translate(model, spec, encoder)
    agreement = check_agreement(model, white, imap, spec, encoder, df)
    oracle = UserModelOracle.build(model, spec, encoder, X_df)
    data = _split(encoder, X_df, y, seed, test_size)
    bundle = UserModelBundle(spec, data, report, white, imap, agreement, model, oracle)
    world_model = white if white is not None else BlackBoxModel(oracle)
    return TabularWorld(f"{name}/{report.estimator}", encoder.schema, world_model, encoder,
                        spec_rules(spec) or None), bundle


def _split(encoder: TabularEncoder, X_df: pd.DataFrame, y: np.ndarray, seed: int, test_size: float) -> TabularData:
    """The encoded rows split as ``data_gen.loaders.load_data`` splits a bundled data set."""
    X = encoder.encode(X_df)
    stratify = y if np.bincount(y, minlength=2).min() >= 2 else None
    train, test = train_test_split(np.arange(len(y)), test_size=test_size, stratify=stratify, random_state=seed)
    h = hashlib.sha256(pd.util.hash_pandas_object(X_df, index=False).to_numpy().tobytes())
    h.update(y.tobytes())
    h.update(f"{seed}/{test_size}".encode())
    return TabularData(X[train], y[train], X[test], y[test], encoder, h.hexdigest()[:16])
