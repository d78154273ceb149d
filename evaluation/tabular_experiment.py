"""Tabular-world experiments: train a data set's classifier, label its rejected agents with MACE,
train the tabular generators on those labels and evaluate them against MACE on held-out agents
(the logic behind ``train.py configs/adult_forest.yaml`` and ``evaluate.py runs/adult_forest``).

A run directory ``<output_dir>/<name>/`` holds:

- ``config.yaml``: the experiment config (a top-level ``tabular:`` mapping marks it);
- ``world/model.json``, ``world/encoder.json``, ``world/metrics.json``: the classifier as a white
  box (envs.models) and the raw-record encoder; ``world/fingerprint.json`` has their SHA-256,
  checked whenever the run is loaded (``load_tabular_run``); ``world/rules.json``: the world's
  rules (``envs.rules``), fingerprinted too, where it has any: ``tabular.rules`` (default: Adult's and
  German's default rules, ``data_gen/default_rules.py``; a run saved without the file has none). A
  user's model without a white box (the black-box route, ``evaluation.blackbox_runs``): model.json is
  a marker naming the stored model file, the labels are GeCo's (not certified) and evaluation is
  against them;
- ``labels/``: MACE's answers for every agent (``labels.parquet`` + ``manifest.json``; the
  ``chunks/`` it was built from make an interrupted labelling resume) and ``split.json`` (which
  agents are held out);
- ``models/<name>/``: each trained generator (learners/tabular/);
- after evaluation ``metrics.json`` and ``report.md``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import Field, model_validator

from data_gen.compute import ComputeConfig
from data_gen.config import StrictModel, parse_model, read_yaml
from data_gen.default_rules import rules_for
from data_gen.loaders import TabularData
from data_gen.mace_labels import MaceLabelSet, label_tabular
from envs.models import model_from_dict
from envs.rules import RuleSet
from envs.tabular import TabularWorld
from evaluation.blackbox_runs import (
    LABELS_LINE,
    NOT_APPLICABLE,
    REFERENCE,
    is_black_box,
    is_marker,
    load_black_box_model,
    write_marker,
)
from evaluation.experiment import fastest
from evaluation.tabular_report import tabular_report
from learners.tabular import (
    TabularGenerator,
    TabularLabels,
    WorldGeometry,
    build_tabular_generator,
)


class MaceSection(StrictModel):
    """MACE's settings for the labels (and for a server's certified fallback)."""

    backend: Literal["milp", "z3"] = Field("milp", description="MILP (HiGHS) or SMT (z3)")
    norm: Literal["zero", "one", "infty"] = Field("one", description="distance of Eq. 3 (MACE §4.2)")
    rel_tol: float = Field(1e-3, ge=0.0, lt=1.0, description="certified iff d - delta_min <= rel_tol * d")
    time_limit: float = Field(30.0, gt=0.0, description="seconds per agent before MACE answers 'unknown'")


class TabularSection(StrictModel):
    """The world and the labelled agents."""

    dataset: Literal["adult", "german", "compas", "credit"] | None = Field(
        None, description="bundled data set (data/); or give `table` for your own")
    table: str | None = Field(None, description="your own table: a CSV or Parquet file (docs/your_data.md)")
    target: str | None = Field(None, description="your table: the target column")
    favourable: Any = Field(None, description="your table: the target's favourable value")
    spec: str | dict[str, Any] | None = Field(None, description="your table: a data spec (YAML path or mapping) merged "
                                              "over the inferred one (python -m data_gen.spec infer)")
    model_file: str | None = Field(None, description="your fitted model (.skops; .joblib/.pkl with trusted; XGBoost "
                                   ".json/.ubj; LightGBM .txt); none: `model` is trained")
    trusted: bool = Field(False, description="load a joblib/pickle model file (unpickling runs code: only your own)")
    model: Literal["tree", "forest", "lr", "mlp"] = Field("forest", description="classifier to train when no "
                                                          "model_file is given (MACE's four)")
    seed: int = Field(0, ge=0, description="seed of the data split, the classifier and the agent sample")
    rules: str = Field("default", description="the world's rules (envs.rules; saved in world/rules.json): default "
                       "(Adult/German: their specs' default rules, data_gen/default_rules.py; your table: its spec's "
                       "rules), none, or a YAML/JSON file of rules")
    agents: int = Field(1000, ge=10, description="rejected agents labelled by MACE (sampled from all rows)")
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="share of the agents held out for evaluation")
    mace: MaceSection = Field(default_factory=MaceSection, description="MACE settings")
    compute: ComputeConfig = Field(default_factory=lambda: ComputeConfig(n_workers=2),
                                   description="where the MACE chunks run (local processes or Ray)")
    chunk_size: int = Field(25, ge=1, description="agents per MACE chunk (a finished chunk survives interrupts)")
    geco_agents: int = Field(30, ge=0, description="test agents also answered by GeCo in evaluation (0: none)")
    generated_agents: int = Field(0, ge=0, description="extra training agents drawn around the rejected training "
                                  "agents (data_gen/perturbed_agents.py), labelled by MACE too; never held out")
    generated_numeric_scale: float = Field(0.05, ge=0.0, description="generated agents: numeric noise, share of span")
    generated_resample_prob: float = Field(0.15, ge=0.0, le=1.0,
                                           description="generated agents: chance a discrete feature takes another row's value")


    @model_validator(mode="after")
    def _source(self) -> TabularSection:
        if (self.dataset is None) == (self.table is None):
            raise ValueError("dataset/table: give exactly one: a bundled data set or your own table")
        if self.table is None and (self.model_file or self.target or self.spec):
            raise ValueError("model_file/target/spec: only with your own `table`")
        return self


class TabularMethod(StrictModel):
    """A tabular generator to train."""

    method: Literal["nearest_cfe", "named_cfe", "change_value", "proposer"] = Field(
        description="learners/tabular/ method (proposer: answers within a query budget, for a model that can only be called)")
    name: str | None = Field(None, description="model name (default: the method)")
    params: dict[str, Any] = Field(default_factory=dict, description="hyperparameters, checked by the method")

    @property
    def label(self) -> str:
        return self.name or self.method


class TabularExperimentConfig(StrictModel):
    """A tabular experiment: world, MACE labels, generators."""

    name: str = Field(description="run-directory name")
    tabular: TabularSection = Field(description="the world and the labelled agents")
    generators: list[TabularMethod] = Field(default_factory=lambda: [TabularMethod(method="named_cfe"),
                                                                      TabularMethod(method="nearest_cfe")],
                                            description="generators to train; the first is the one served")
    output_dir: str = Field("runs", description="where run directories are written")

    @model_validator(mode="after")
    def _check(self) -> TabularExperimentConfig:
        labels = [g.label for g in self.generators]
        if len(set(labels)) < len(labels):
            raise ValueError(f"generators: model names must differ (give each a 'name'), got {labels}")
        for i, g in enumerate(self.generators):
            try:
                build_tabular_generator(g.method, g.params)
            except (TypeError, ValueError) as err:
                raise ValueError(f"generators.{i}.params: {err}") from None
        return self


def is_tabular_config(data: Any) -> bool:
    """Whether a parsed YAML is a tabular experiment (it has a ``tabular`` mapping)."""
    return isinstance(data, dict) and "tabular" in data


def load_tabular_config(path: str | Path) -> TabularExperimentConfig:
    return parse_model(TabularExperimentConfig, read_yaml(path), str(path))


def is_tabular_run(run_dir: str | Path) -> bool:
    path = Path(run_dir) / "config.yaml"
    return path.exists() and is_tabular_config(yaml.safe_load(path.read_text()))


# ----------------------------------------------------------------------------------------- training

def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fingerprint(world_dir: Path) -> tuple[str, str] | None:
    """(model, encoder) SHA-256 of a run's world as last written; None before the first write."""
    path = world_dir / "fingerprint.json"
    if not path.exists():
        return None
    fp = json.loads(path.read_text())
    return fp.get("model_sha256", ""), fp.get("encoder_sha256", "")


def _write_world(world: TabularWorld, metrics: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if is_black_box(world):  # no JSON of the user's model: a marker naming its stored file and SHA-256
        write_marker(out)
    else:
        world.model.save(out / "model.json")
    (out / "encoder.json").write_text(json.dumps(world.encoder.to_dict()))
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    fp = {"name": world.name, "model_sha256": _sha(out / "model.json"), "encoder_sha256": _sha(out / "encoder.json")}
    if world.rules:  # the user's rules (envs.rules), fingerprinted with the model and the encoder
        (out / "rules.json").write_text(json.dumps(world.rules.to_dict(), indent=1))
        fp["rules_sha256"] = _sha(out / "rules.json")
    (out / "fingerprint.json").write_text(json.dumps(fp, indent=1))


def load_world(world_dir: str | Path, *, trusted: bool = False) -> TabularWorld:
    """The run's world, after checking its files against ``fingerprint.json``; ``trusted``: load a
    black-box run's model file as the run's config allows (pickles)."""
    from data_gen.tabular_encoder import TabularEncoder

    d = Path(world_dir)
    fp_path = d / "fingerprint.json"
    if not fp_path.exists():
        raise FileNotFoundError(f"world: {fp_path} is missing (not a tabular run, or an unfinished one)")
    fp = json.loads(fp_path.read_text())
    for key, name in (("model_sha256", "model.json"), ("encoder_sha256", "encoder.json"), ("rules_sha256", "rules.json")):
        if key not in fp and key == "rules_sha256":
            continue  # a world without rules (or saved before them)
        if not (d / name).exists():
            raise FileNotFoundError(f"world: {d / name} is missing")
        if _sha(d / name) != fp[key]:
            raise ValueError(f"world: {d / name} does not match its fingerprint ({fp_path}); the file was changed")
    encoder = TabularEncoder.from_dict(json.loads((d / "encoder.json").read_text()))
    raw = json.loads((d / "model.json").read_text())
    model = load_black_box_model(d, encoder, raw, trusted=trusted) if is_marker(raw) else model_from_dict(raw)
    rules = RuleSet.from_dict(json.loads((d / "rules.json").read_text())) if "rules_sha256" in fp else None
    return TabularWorld(fp["name"], encoder.schema, model, encoder, rules)


def sample_agents(world: TabularWorld, X: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` rejected rows of ``X`` (all of them when there are fewer), in a seeded random order."""
    neg = X[~world.accepts(X)]
    if not len(neg):
        raise ValueError(f"tabular: the {world.name} model rejects no row; there is nobody to explain")
    order = np.random.default_rng(seed).permutation(len(neg))
    return neg[order[:n]]


def split_agents(X: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row indices; the test rows are a seeded random share."""
    order = np.random.default_rng(seed + 1).permutation(len(X))
    n_test = max(1, int(round(test_fraction * len(X))))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def train_tabular(cfg: TabularExperimentConfig, progress: bool = True) -> Path:
    """Classifier, MACE labels (resumable; GeCo's on the black-box route), generators; returns the run directory."""
    from data_gen.classifiers import build
    from solvers.mace import MACE

    t = cfg.tabular
    run_dir = Path(cfg.output_dir) / cfg.name
    fresh = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:  # a world that cannot be built (bad table, model or spec) leaves no half-written run behind
        (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        if t.table is not None:
            world, data_split, metrics = _user_world(cfg, run_dir / "world", progress)
            rules = rules_for(t.rules, spec_rules=world.rules or RuleSet())
        else:
            built = build(t.dataset, t.model, seed=t.seed)
            world, data_split, metrics = built.world, built.data, built.metrics
            rules = rules_for(t.rules, dataset=t.dataset)
        world = dataclasses.replace(world, rules=rules)  # checked against the schema here (RuleError)
        before = _fingerprint(run_dir / "world")
        _write_world(world, metrics, run_dir / "world")
        if before is not None and before != _fingerprint(run_dir / "world") and (run_dir / "labels").exists():
            # Labels resume by agent: a changed model or encoding (a refitted model under the same run name)
            # must not reuse the old model's answers.
            shutil.rmtree(run_dir / "labels")
            if progress:
                print(f"{run_dir.name}: the model or encoding changed since the last run: its labels are redone")
    except BaseException:
        if fresh:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    if progress and "test_accuracy" in metrics:
        print(f"{world.name}: test accuracy {metrics['test_accuracy']:.3f}")
    X_all = np.concatenate([data_split.X_train, data_split.X_test])
    agents = sample_agents(world, X_all, t.agents, t.seed)
    if is_black_box(world):  # MACE cannot read the model: GeCo labels, fitted on the training rows
        from data_gen.geco_labels import GecoLabeller

        if progress:
            print(LABELS_LINE)
        mace: Any = GecoLabeller(world, data_split.X_train, norm=t.mace.norm, seed=t.seed)
        chunks, meta = "chunks_geco", {"reference": REFERENCE, **mace.settings()}
    else:
        mace, chunks, meta = MACE(**t.mace.model_dump()), "chunks", {"mace": t.mace.model_dump()}
    if world.rules:  # labels under other rules are never resumed from (a run trained before them: chunks/)
        chunks += "_rules_" + hashlib.sha256(json.dumps(world.rules.to_dict(), sort_keys=True).encode()).hexdigest()[:12]
        meta["rules"] = world.rules.to_dict()
    labels = label_tabular(world, agents, mace, run_dir / "labels" / chunks, chunk_size=t.chunk_size,
                           progress=progress, compute=t.compute)
    labels.save(run_dir / "labels", meta={**meta, "world": world.name})
    train, test = split_agents(agents, t.test_fraction, t.seed)
    (run_dir / "labels" / "split.json").write_text(json.dumps({"train": train.tolist(), "test": test.tolist()}))
    ok = labels.ok
    rows = train[ok[train]]
    data = TabularLabels(labels.X[rows], labels.cf[rows], labels.distance[rows])
    if t.generated_agents:
        data = _with_generated(world, agents[train], data, mace, t, run_dir, progress)
    if any(int(spec.params.get("self_labels", 0) or 0) > 0 or spec.params.get("setting") == "auto"
           for spec in cfg.generators):  # (a fit that chooses its setting counts them)
        data = dataclasses.replace(data, unlabelled=_unlabelled(world, data_split.X_train, agents))
    from learners.tabular.compile import compile_kernels

    # The search kernels, compiled once per machine into numba's cache (the served run and the audit reuse
    # it): paid here, visibly, rather than by the first request or inside a method's timing.
    compiled = compile_kernels(progress=progress)
    if progress:
        print(f"search kernels ready in {compiled['seconds']:.1f} s"
              f"{' (from the cache)' if compiled.get('from_cache') else ''}")
    for spec in cfg.generators:
        t0 = time.perf_counter()
        params = dict(spec.params)
        if (int(params.get("self_labels", 0) or 0) > 0 or params.get("setting") == "auto") \
                and not params.get("self_label_memory"):  # an interrupted fit resumes
            params["self_label_memory"] = str(run_dir / "self_labels" / spec.label)
        if (int(params.get("student_agents", 0) or 0) > 0 or params.get("setting") == "auto") \
                and not params.get("student_memory"):  # the model's answers for a student, kept likewise
            params["student_memory"] = str(run_dir / "student" / spec.label)
        gen = build_tabular_generator(spec.method, params).fit(world, data, seed=t.seed, progress=progress)
        gen.save(run_dir / "models" / spec.label)
        meta = {"fit_seconds": time.perf_counter() - t0, "train_agents": int(len(data.X)),
                "generated_train_agents": int(len(data.X) - len(rows))}
        (run_dir / "models" / spec.label / "fit.json").write_text(json.dumps(meta))
        if progress:
            print(f"trained {spec.label} on {len(data.X)} agents in {meta['fit_seconds']:.1f}s")
    return run_dir


def _user_world(cfg: TabularExperimentConfig, world_dir: Path, progress: bool) -> tuple[TabularWorld, Any, dict]:
    """The world of the user's table and model (``data_gen.user_world``), its spec, split and route saved."""
    from data_gen.user_world import build_user_world
    from evaluation.user_runs import save_user_world

    t = cfg.tabular
    world, bundle = build_user_world(t.table, spec=t.spec, target=t.target, favourable=t.favourable,
                                     model_path=t.model_file, trusted=t.trusted, model_class=t.model, seed=t.seed,
                                     name=cfg.name)
    save_user_world(world_dir, bundle, model_file=t.model_file, source=str(t.table))
    metrics = dict(bundle.metrics)
    if bundle.agreement is not None:
        metrics["agreement"] = {k: v for k, v in vars(bundle.agreement).items() if isinstance(v, int | float | str)}
    for split in ("train", "test"):
        X, y = getattr(bundle.data, f"X_{split}"), getattr(bundle.data, f"y_{split}")
        metrics.setdefault(f"{split}_accuracy", float(np.mean(world.accepts(X) == (y == 1))))
    if progress:
        print(f"{world.name}: {bundle.report}")
    return world, bundle.data, metrics


def _unlabelled(world: TabularWorld, X_train: np.ndarray, agents: np.ndarray) -> np.ndarray:
    """The rejected training rows MACE did not label (none of ``agents``, held-out ones included), in the table's
    order: a proposer with ``self_labels`` answers them itself (``learners/tabular/self_labels.py``)."""
    from data_gen.classifiers import negatives

    seen = {row.tobytes() for row in np.asarray(agents, float)}
    rejected = np.asarray(negatives(world, X_train), float)
    return rejected[[row.tobytes() not in seen for row in rejected]]


def _with_generated(world: TabularWorld, train_agents: np.ndarray, data: TabularLabels, mace: Any,
                    t: TabularSection, run_dir: Path, progress: bool) -> TabularLabels:
    """``data`` plus MACE's answers for ``t.generated_agents`` agents drawn around the training
    agents. Their chunks live under a key of everything that shapes them, so a changed setting
    never reuses another's labels and an interrupted run resumes."""
    from data_gen.perturbed_agents import PerturbParams, perturb_agents

    params = PerturbParams(t.generated_numeric_scale, t.generated_resample_prob)
    key = hashlib.sha256(json.dumps({"n": t.generated_agents, "seed": t.seed, "perturb": dataclasses.asdict(params),
                                     "mace": t.mace.model_dump(), "agents": t.agents,
                                     "test_fraction": t.test_fraction,
                                     **({"rules": world.rules.to_dict()} if world.rules else {})},
                                    sort_keys=True).encode()).hexdigest()[:12]
    gen_agents = perturb_agents(world, train_agents, t.generated_agents, seed=t.seed, params=params)
    out = run_dir / "labels_generated"
    labels = label_tabular(world, gen_agents, mace, out / f"chunks_{key}", chunk_size=t.chunk_size,
                           progress=progress, compute=t.compute)
    labels.save(out, meta={"mace": t.mace.model_dump(), "world": world.name, "key": key,
                           "perturb": dataclasses.asdict(params)})
    ok = labels.ok
    if progress:
        print(f"generated agents: {int(ok.sum())} of {len(labels)} solved by {getattr(mace, 'label', 'MACE')}, added to "
              f"{len(data.X)} training labels")
    return TabularLabels(np.concatenate([data.X, labels.X[ok]]), np.concatenate([data.CF, labels.cf[ok]]),
                         np.concatenate([data.distance, labels.distance[ok]]))


# ---------------------------------------------------------------------------------------- loading

@dataclass
class TabularRun:
    """A trained tabular run, ready to answer."""

    run_dir: Path
    config: TabularExperimentConfig
    world: TabularWorld
    generators: dict[str, TabularGenerator]  # in config order: the first is the default
    metrics: dict[str, Any] | None

    @property
    def mace_params(self) -> dict[str, Any]:
        """Keyword arguments of solvers.mace.MACE as the labels used them."""
        return self.config.tabular.mace.model_dump()

    def data(self) -> TabularData:
        """The run's encoded split: the bundled data set's (checked against the run's encoder), or the one
        a run on the user's table stored (``world/data.npz``)."""
        from data_gen.loaders import load_data

        t = self.config.tabular
        if t.table is not None:
            from evaluation.user_runs import load_user_data

            return load_user_data(self.run_dir / "world", self.world.encoder)
        data = load_data(t.dataset, seed=t.seed)
        if data.encoder != self.world.encoder:
            raise ValueError(f"run: the bundled {t.dataset} data no longer matches the run's encoder")
        return data

    def domain_rows(self) -> np.ndarray:
        """The classifier's training rows: the active domain GeCo samples values from (``GeCo.fit``)."""
        return self.data().X_train

    @property
    def black_box(self) -> bool:
        """On the black-box route: GeCo labels, no MACE, nothing certified (``evaluation.blackbox_runs``)."""
        return is_black_box(self.world)

    def user_oracle(self) -> Any:
        """The user's own model as a verifier of encoded rows (None: the run trained its own classifier)."""
        if self.config.tabular.table is None:
            return None
        if self.black_box:  # the world's model is the oracle, loaded and checked with the world
            return self.world.model.oracle
        from evaluation.user_runs import load_user_oracle

        return load_user_oracle(self.run_dir / "world", self.world.encoder, trusted=self.config.tabular.trusted)

    def labels(self) -> MaceLabelSet:
        return MaceLabelSet.load(self.run_dir / "labels")

    def split(self) -> tuple[np.ndarray, np.ndarray]:
        s = json.loads((self.run_dir / "labels" / "split.json").read_text())
        return np.asarray(s["train"], np.int64), np.asarray(s["test"], np.int64)


def load_tabular_run(run_dir: str | Path) -> TabularRun:
    """Config, fingerprint-checked world, generators and metrics of a run directory."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise FileNotFoundError(f"run: {run_dir} has no config.yaml (not a run directory)")
    cfg = parse_model(TabularExperimentConfig, yaml.safe_load((run_dir / "config.yaml").read_text()),
                      str(run_dir / "config.yaml"))
    world = load_world(run_dir / "world", trusted=cfg.tabular.trusted)
    gens = {}
    for spec in cfg.generators:
        path = run_dir / "models" / spec.label
        if not path.exists():
            raise FileNotFoundError(f"run: model {spec.label!r} was not trained ({path} is missing)")
        gens[spec.label] = TabularGenerator.load(path)
    metrics = json.loads((run_dir / "metrics.json").read_text()) if (run_dir / "metrics.json").exists() else None
    return TabularRun(run_dir, cfg, world, gens, metrics)


# -------------------------------------------------------------------------------------- evaluation

def _valid_and_distance(world: TabularWorld, geo: WorldGeometry, X: np.ndarray, CF: np.ndarray, found: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(N,) the answers the model accepts that keep the agent's box, integer codes and rules, and (N,) their
    distances (inf where none)."""
    valid = np.zeros(len(X), bool)
    if found.any():
        rows = np.flatnonzero(found)
        valid[rows] = world.accepts(CF[rows]) & ~geo.violations(X[rows], CF[rows])  # the model's own rule
    return valid, np.where(found, geo.distance(X, np.nan_to_num(CF)), np.inf)


def _optimal(valid: np.ndarray, d: np.ndarray, solved: np.ndarray, mace_d: np.ndarray, rel: float) -> np.ndarray:
    """(N,) valid answers within ``rel`` of MACE's distance, for the agents ``solved`` (found, and MACE's too)."""
    return solved & valid & (d <= np.where(solved, mace_d, 0.0) * (1 + rel) + 1e-12)


def optimal_answers(world: TabularWorld, X: np.ndarray, CF: np.ndarray, found: np.ndarray, mace_d: np.ndarray,
                    mace_ok: np.ndarray, norm: str = "one", rel: float = 0.01) -> np.ndarray:
    """(N,) per agent, whether its answer counts as optimal in ``score_answers``' ``optimal_share``."""
    valid, d = _valid_and_distance(world, WorldGeometry.of(world, norm), X, CF, found)
    return _optimal(valid, d, found & mace_ok, mace_d, rel)


def score_answers(world: TabularWorld, X: np.ndarray, CF: np.ndarray, found: np.ndarray, mace_d: np.ndarray,
                  mace_ok: np.ndarray, norm: str = "one", rel: float = 0.01) -> dict[str, Any]:
    """Validity, coverage and the distance against MACE's certified optimum of a batch of answers. An answer
    counts as optimal only if it is valid too (accepted, in the agent's box, integer columns integral, the rules
    kept): a row nearer than MACE's optimum is nearer because it breaks something."""
    geo = WorldGeometry.of(world, norm)
    n = len(X)
    f = found & mace_ok
    valid, d = _valid_and_distance(world, geo, X, CF, found)
    ratio = d[f] / np.maximum(mace_d[f], 1e-12)
    changed = (geo.deltas(X[found], CF[found]) > 1e-12).sum(1) if found.any() else np.zeros(0)
    return {
        "agents": int(n),
        "mace_solved": int(mace_ok.sum()),
        "coverage": float(found[mace_ok].mean()) if mace_ok.any() else None,
        "validity": float(valid[found].mean()) if found.any() else None,
        "answered_without_mace_answer": int((found & ~mace_ok).sum()),
        "optimal_share": float(_optimal(valid, d, f, mace_d, rel).sum() / max(1, mace_ok.sum())),
        "distance_ratio_mean": float(ratio.mean()) if len(ratio) else None,
        "distance_ratio_median": float(np.median(ratio)) if len(ratio) else None,
        "distance_ratio_p90": float(np.quantile(ratio, 0.9)) if len(ratio) else None,
        "mean_distance": float(d[f].mean()) if f.any() else None,
        "mean_changed_features": float(changed.mean()) if len(changed) else None,
    }


def evaluate_tabular(run_dir: str | Path, progress: bool = True) -> dict[str, Any]:
    """Every generator of the run on its held-out agents, beside MACE (and GeCo): metrics.json, report.md."""
    run = load_tabular_run(run_dir)
    labels, (train, test) = run.labels(), run.split()
    world, t = run.world, run.config.tabular
    X, mace_d, mace_ok = labels.X[test], labels.distance[test], labels.ok[test]
    train_keys = {row.tobytes() for row in labels.X[train]}
    unseen = np.array([row.tobytes() not in train_keys for row in X])
    out: dict[str, Any] = {
        "world": world.name, "classifier": json.loads((run.run_dir / "world" / "metrics.json").read_text()),
        "labels": labels.summary(), "train_agents": int(len(train)), "test_agents": int(len(test)),
        "unseen_test_agents": int(unseen.sum()),
        "mace": {"s_per_agent_mean": float(labels.runtime[test].mean()),
                 "s_per_agent_max": float(labels.runtime[test].max()),
                 "certified_share": NOT_APPLICABLE if run.black_box else
                 float(np.mean(labels.distance[test][mace_ok] - labels.delta_min[test][mace_ok]
                               <= t.mace.rel_tol * labels.distance[test][mace_ok] + 1e-7))
                 if mace_ok.any() else None},
        "generators": {},
        "route": "black-box" if run.black_box else "white-box",
        "reference": REFERENCE if run.black_box else "MACE, certified",  # what the labels (and "mace" here) are
    }
    variants = [(name, gen, None) for name, gen in run.generators.items()]
    variants += [(f"{name}, no polish", gen, -1) for name, gen in run.generators.items()]
    for name, gen, rounds in variants:
        def answer(rows: np.ndarray, g: TabularGenerator = gen, r: int | None = rounds):
            return g.recommend(world, rows, norm=t.mace.norm, polish_rounds=r)

        answer(X[:8])  # warm-up (first-call allocations)
        secs, rec = fastest(lambda a=answer: a(X), 3)
        single = []
        for i in range(min(50, len(X))):
            t0 = time.perf_counter()
            answer(X[i:i + 1])
            single.append(time.perf_counter() - t0)
        m = score_answers(world, X, rec.CF, rec.found, mace_d, mace_ok, t.mace.norm)
        m["unseen"] = score_answers(world, X[unseen], rec.CF[unseen], rec.found[unseen], mace_d[unseen],
                                    mace_ok[unseen], t.mace.norm)
        m["us_per_agent_batched"] = 1e6 * secs / len(X)
        m["ms_single_p50"], m["ms_single_p99"] = (1e3 * float(np.quantile(single, q)) for q in (0.5, 0.99))
        m["speedup_vs_mace"] = out["mace"]["s_per_agent_mean"] / (secs / len(X))
        fit = run.run_dir / "models" / name.split(",")[0] / "fit.json"
        m["fit"] = json.loads(fit.read_text()) if fit.exists() else None
        out["generators"][name] = m
        if progress:
            print(f"{name}: validity {m['validity']}, coverage {m['coverage']}, "
                  f"{'within 1% of GeCo' if run.black_box else 'optimal'} {m['optimal_share']:.3f}, "
                  f"{m['us_per_agent_batched']:.0f} µs/agent")
    if t.geco_agents and not run.black_box:  # on the black-box route GeCo is the reference itself
        out["geco"] = _geco_baseline(world, run.domain_rows(), X[: t.geco_agents], mace_d[: t.geco_agents],
                                     mace_ok[: t.geco_agents], t.mace.norm)
    (run.run_dir / "metrics.json").write_text(json.dumps(out, indent=1, default=float))
    (run.run_dir / "report.md").write_text(tabular_report(out))
    return out


def _geco_baseline(world: TabularWorld, domain: np.ndarray, X: np.ndarray, mace_d: np.ndarray, mace_ok: np.ndarray, norm: str
                   ) -> dict[str, Any]:
    """GeCo (black box, no learning) on the first test agents: the online search a generator replaces."""
    from solvers.geco import GeCo

    geco = GeCo(n_diverse=1).fit(world, domain)
    CF = np.full(X.shape, np.nan)
    secs = []
    for i, x in enumerate(X):
        t0 = time.perf_counter()
        r = geco.solve(world, x)[0]
        secs.append(time.perf_counter() - t0)
        if r.status == "ok":
            CF[i] = np.asarray(r.extra["counterfactual"], float)
    found = ~np.isnan(CF).any(1)
    m = score_answers(world, X, CF, found, mace_d, mace_ok, norm)
    m["s_per_agent_mean"], m["s_per_agent_max"] = float(np.mean(secs)), float(np.max(secs))
    return m
