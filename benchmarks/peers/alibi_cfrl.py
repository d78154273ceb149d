"""alibi's CounterfactualRLTabular (pytorch backend) on one cell of benchmarks/peers.py, in the alibi venv.

    <alibi-venv>/bin/python benchmarks/peers/alibi_cfrl.py WORK_DIR

WORK_DIR holds ``inputs.npz`` and ``spec.json`` written by ``benchmarks/peers.py``; the answers go to
``WORK_DIR/answers.json``. Standalone on purpose (numpy < 2 here): it imports nothing of the project.

1. the model: retrained with scikit-learn from the same encoded rows, parameters and seed as
   ``data_gen.classifiers.train_model`` (StandardScaler for the MLP), and checked against our model's
   decisions on every train and test row (``disagreements``);
2. the data in alibi's format: one column per raw feature, numbers as they are, categorical
   (binary, one-hot group) as integer codes; immutable features -> ``immutable_features``,
   increase-/decrease-only numbers -> ``ranges`` [0, 1] / [-1, 0] (increase-only binaries cannot be
   said: their breaks are counted as violations by the caller);
3. the heterogeneous autoencoder (alibi's ADULTEncoder / ADULTDecoder), trained here with a plain
   loop (MSE on the standardized numbers + cross-entropy per categorical feature), then CFRL's
   DDPG training for ``steps`` steps;
4. each agent explained on its own (one call), timed, with the predictor's calls counted.

``num_workers`` in the spec: the data loader's worker processes (alibi's default is 4; they draw the
conditioning vectors, a Python loop per row that is 40% of a step in one process; 0 before 2026-11-28).
``deadline_seconds`` in the spec stops the training at that many seconds of it (the steps reached are
reported; a machine lent for minutes, not hours); the agents are then explained as after a full run.
Where spacy is not installed (the GPU image, which installs nothing), a stand-in lets alibi import:
alibi imports spacy only for its text explainers, which CFRL never calls.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import sklearn
import torch
from sklearn.ensemble import RandomForestClassifier
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler


class StopTraining(Exception):
    """Raised by the checkpoint callback at the spec's deadline_seconds."""


def stand_in_for_spacy() -> None:
    """Let ``import alibi`` succeed without spacy: any use of a spacy name raises ImportError."""
    import importlib.util
    import types

    if importlib.util.find_spec("spacy") is not None:
        return

    def missing(name: str):
        def call(*args, **kwargs):
            raise ImportError(f"{name}: spacy is not installed (alibi's text explainers need it; CFRL does not)")
        return call

    for name in ("spacy", "spacy.util", "spacy.cli", "spacy.tokens", "spacy.language"):
        module = types.ModuleType(name)
        module.__path__ = []

        def lookup(attr: str, _name: str = name):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return missing(f"{_name}.{attr}")

        module.__getattr__ = lookup
        sys.modules[name] = module


def main(work: Path) -> None:
    stand_in_for_spacy()
    import alibi
    from alibi.explainers import CounterfactualRLTabular
    from alibi.explainers.backends.cfrl_tabular import get_he_preprocessor
    from alibi.models.pytorch.cfrl_models import ADULTDecoder, ADULTEncoder

    spec = json.loads((work / "spec.json").read_text())
    z = np.load(work / "inputs.npz")
    sp, seed = spec["space"], int(spec["seed"])
    torch.set_num_threads(int(spec.get("threads", 1)))  # small nets: extra threads only spin on a shared machine
    torch.manual_seed(seed)
    np.random.seed(seed)

    # 1. the model, retrained and checked
    cls = {"forest": RandomForestClassifier, "mlp": MLPClassifier}[spec["model"]]
    params = dict(spec["params"])
    if "hidden_layer_sizes" in params:
        params["hidden_layer_sizes"] = tuple(params["hidden_layer_sizes"])
    est = cls(random_state=seed, **params)
    scaler = StandardScaler().fit(z["X_train"]) if spec["model"] == "mlp" else None

    def prep(X: np.ndarray) -> np.ndarray:
        return scaler.transform(X) if scaler is not None else X

    est.fit(prep(z["X_train"]), z["y_train"])
    disagree = int((est.predict(prep(z["X_train"])) != z["pred_train"]).sum()
                   + (est.predict(prep(z["X_test"])) != z["pred_test"]).sum())
    checked = int(len(z["X_train"]) + len(z["X_test"]))

    def encode(R: np.ndarray) -> np.ndarray:
        R = np.atleast_2d(np.asarray(R, float))
        X = np.zeros((len(R), sp["n_columns"]))
        for j, (kind, cols) in enumerate(zip(sp["kinds"], sp["columns"], strict=True)):
            if kind == "group":
                code = np.clip(np.round(R[:, j]), 0, len(cols) - 1).astype(int)
                X[:, cols] = np.eye(len(cols))[code]
            else:
                X[:, cols[0]] = R[:, j]
        return X

    counter = {"calls": 0, "rows": 0}

    def predictor(R: np.ndarray) -> np.ndarray:
        counter["calls"] += 1
        counter["rows"] += len(R)
        return est.predict_proba(prep(encode(R)))

    # 2. alibi's format
    names = sp["names"]
    cat_idx = [j for j, num in enumerate(sp["numeric"]) if not num]
    category_map = {j: [str(v) for v in range(sp["n_levels"][j])] for j in cat_idx}
    R_train = z["R_train"].astype(float)
    feature_types = {names[j]: int for j, num in enumerate(sp["numeric"])
                     if num and np.allclose(R_train[:, j], np.round(R_train[:, j]))}
    immutable = [n for n, m in zip(names, sp["mutability"], strict=True) if m == "immutable"]
    ranges = {n: [0.0, 1.0] if m == "increase" else [-1.0, 0.0]
              for n, m, num in zip(names, sp["mutability"], sp["numeric"], strict=True) if num and m in ("increase", "decrease")}
    pre, inv = get_he_preprocessor(X=R_train, feature_names=names, category_map=category_map,
                                   feature_types=feature_types)
    P = pre(R_train).astype(np.float32)

    # 3. autoencoder (numbers first, then one block per categorical feature, as alibi's preprocessor)
    n_num = sum(sp["numeric"])
    cat_dims = [len(category_map[j]) for j in cat_idx]
    output_dims = ([n_num] if n_num else []) + cat_dims
    latent = 15
    enc, dec = ADULTEncoder(hidden_dim=128, latent_dim=latent), ADULTDecoder(hidden_dim=128, output_dims=output_dims)
    opt = torch.optim.Adam(list(enc.parameters()) + list(dec.parameters()), lr=1e-3)
    targets_num = torch.tensor(P[:, :n_num])
    targets_cat = torch.tensor(R_train[:, cat_idx].astype(np.int64)) if cat_idx else None
    Pt = torch.tensor(P)
    t0 = time.perf_counter()
    epochs = int(spec.get("ae_epochs", 10))
    for _ in range(epochs):
        perm = torch.randperm(len(Pt))
        for s in range(0, len(Pt), 128):
            b = perm[s:s + 128]
            out = dec(enc(Pt[b]))
            loss = torch.tensor(0.0)
            k = 0
            if n_num:
                loss = loss + torch.nn.functional.mse_loss(out[0], targets_num[b])
                k = 1
            for c in range(len(cat_idx)):
                loss = loss + torch.nn.functional.cross_entropy(out[k + c], targets_cat[b, c]) / max(1, len(cat_idx))
            opt.zero_grad()
            loss.backward()
            opt.step()
    ae_s = time.perf_counter() - t0

    explainer = CounterfactualRLTabular(predictor=predictor, encoder=enc, decoder=dec, latent_dim=latent,
                                        encoder_preprocessor=pre, decoder_inv_preprocessor=inv,
                                        coeff_sparsity=0.5, coeff_consistency=0.5, category_map=category_map,
                                        feature_names=names, immutable_features=immutable or None,
                                        ranges=ranges or None, train_steps=int(spec["steps"]), batch_size=100,
                                        num_workers=int(spec.get("num_workers", 0)), backend="pytorch", seed=seed)
    calls0 = counter["calls"]
    t1 = time.perf_counter()
    curve = []  # the learning curve: every agent explained at each checkpoint (spec "checkpoints")
    paused = [0.0]  # seconds spent explaining at checkpoints (not training)
    marks = sorted(int(c) for c in spec.get("checkpoints", []) if 0 < int(c) < int(spec["steps"]))
    deadline = float(spec.get("deadline_seconds", float("inf")))
    reached = [0]  # the last step trained
    if marks or np.isfinite(deadline):
        from alibi.explainers.cfrl_base import Callback

        class Checkpoint(Callback):
            def __call__(self, step, update, model, sample, losses):
                reached[0] = int(step)
                if update == model.params["update_every"] - 1 and time.perf_counter() - t1 - paused[0] > deadline:
                    raise StopTraining
                if not marks or step < marks[0] or update != model.params["update_every"] - 1:
                    return
                marks.pop(0)
                c0, t = counter["calls"], time.perf_counter()
                cond = model.params["conditional_func"](np.zeros((1, len(names)))) is not None
                expl = model.explain(z["R_agents"], np.ones(len(z["R_agents"]), int), C=[] if cond else None)
                counter["calls"] = c0  # explaining here is not training
                curve.append({"steps": int(step), "train_seconds": t - t1 - paused[0], "train_model_calls": c0 - calls0,
                              "R_cf": np.asarray(expl.data["cf"]["X"], float).reshape(-1, len(names)).tolist()})
                paused[0] += time.perf_counter() - t
                print(f"CFRL checkpoint {step} steps, {curve[-1]['train_seconds']:.0f} s", file=sys.stderr, flush=True)
                (work / "curve.json").write_text(json.dumps(curve))  # kept if the run is cut off

        explainer.params["callbacks"] = [Checkpoint()]  # a new list: alibi's default one is shared
    try:
        explainer.fit(X=R_train)
        reached[0] = int(spec["steps"])
    except StopTraining:
        print(f"CFRL stopped at its deadline, {reached[0]} steps", file=sys.stderr, flush=True)
    rl_s = time.perf_counter() - t1 - paused[0]
    train_calls = counter["calls"] - calls0

    # 4. one agent per call
    conditioned = explainer.params["conditional_func"](np.zeros((1, len(names)))) is not None
    # warm-up (the first call's allocations; benchmarks/warmup.py's line, this script imports nothing of the project)
    print("warming up CFRL on one agent (compiling kernels, not timed) ...", end=" ", file=sys.stderr, flush=True)
    t = time.perf_counter()
    explainer.explain(np.atleast_2d(z["R_agents"][0]), np.array([1]), C=[] if conditioned else None)
    print(f"{time.perf_counter() - t:.2f} s", file=sys.stderr, flush=True)
    R_cf, secs, cpus, calls = [], [], [], []
    for r in z["R_agents"]:
        c0 = counter["calls"]
        t, c = time.perf_counter(), time.process_time()
        expl = explainer.explain(np.atleast_2d(r), np.array([1]), C=[] if conditioned else None)
        secs.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
        calls.append(counter["calls"] - c0)
        cf = np.asarray(expl.data["cf"]["X"], float).reshape(-1, len(names))[0]
        R_cf.append(cf.tolist())
    (work / "answers.json").write_text(json.dumps({
        "R_cf": R_cf, "seconds": secs, "cpu_seconds": cpus, "model_calls": calls, "steps": reached[0],
        "device": str(torch.device("cuda" if torch.cuda.is_available() else "cpu")),
        "ae_seconds": ae_s, "rl_seconds": rl_s, "train_seconds": ae_s + rl_s, "train_model_calls": train_calls,
        "disagreements": disagree, "checked_rows": checked, "ae_epochs": epochs, "curve": curve,
        "num_workers": int(spec.get("num_workers", 0)), "threads": int(spec.get("threads", 1)),
        "versions": {"alibi": alibi.__version__, "torch": torch.__version__, "numpy": np.__version__,
                     "sklearn": sklearn.__version__}}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
