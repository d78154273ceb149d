"""The real data sets: bundled files, loaders and raw-feature specs.

The seven data sets of ``data/`` (Adult, German Credit, COMPAS, Credit default, Hill-Valley,
Arrhythmia, LSVT) ship with the repository, gzip-compressed, with the SHA-256 of every file's
content in ``data/SHA256SUMS``; ``data_path`` checks it before a file is read, so a corrupted or
different copy fails loudly instead of training a different model. ``RECOURSE_DATA_DIR`` (or a
``data_dir`` argument) points at another copy, compressed or not.

Each tabular data set has a loader, a raw-feature spec (kind and mutability, MACE Appendix B.2
and GeCo Appendix A.1); ``load_data`` fits a ``TabularEncoder`` (``data_gen.tabular_encoder``)
between raw records and the encoded columns of ``envs.tabular.TabularWorld``. Classifiers are
trained in ``data_gen.classifiers``.

Label 1 is always the favourable outcome. GeCo's implications between features (e.g. "more
education implies older") are not schema rules; solvers add them as constraints.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from data_gen.tabular_encoder import RawColumn, TabularEncoder
from envs.schema import Mutability

# --------------------------------------------------------------------------------------------- spec

@dataclass(frozen=True)
class DatasetSpec:
    """A data set: its raw features (in column order) and a loader ``data_dir -> (frame, labels)``."""

    name: str
    features: tuple[RawColumn, ...]
    load: Callable[[Path], tuple[pd.DataFrame, np.ndarray]]


ADULT_COLUMNS = ("age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                 "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                 "hours-per-week", "native-country", "income")
ADULT_EDUCATION = ("Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th",  # codes 1..16
                   "HS-grad", "Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters",
                   "Prof-school", "Doctorate")

GERMAN_COLUMNS = ("checking_status", "duration", "credit_history", "purpose", "credit_amount",
                  "savings_status", "employment", "installment_rate", "personal_status_sex", "other_debtors",
                  "residence_since", "property", "age", "other_installment_plans", "housing",
                  "existing_credits", "job", "num_dependents", "own_telephone", "foreign_worker", "class")
GERMAN_CODES: dict[str, dict[str, str]] = {  # UCI german.doc
    "checking_status": {"A11": "<0 DM", "A12": "0-200 DM", "A13": ">=200 DM", "A14": "no checking account"},
    "credit_history": {"A30": "no credits / all paid duly", "A31": "all paid duly at this bank",
                       "A32": "existing paid duly", "A33": "delay in the past", "A34": "critical account"},
    "purpose": {"A40": "car (new)", "A41": "car (used)", "A42": "furniture/equipment",
                "A43": "radio/television", "A44": "domestic appliances", "A45": "repairs",
                "A46": "education", "A47": "vacation", "A48": "retraining", "A49": "business",
                "A410": "others"},
    "savings_status": {"A61": "<100 DM", "A62": "100-500 DM", "A63": "500-1000 DM", "A64": ">=1000 DM",
                       "A65": "unknown / none"},
    "employment": {"A71": "unemployed", "A72": "<1 year", "A73": "1-4 years", "A74": "4-7 years",
                   "A75": ">=7 years"},
    "personal_status_sex": {"A91": "male: divorced/separated", "A92": "female: divorced/separated/married",
                            "A93": "male: single", "A94": "male: married/widowed", "A95": "female: single"},
    "housing": {"A151": "rent", "A152": "own", "A153": "for free"},
    "job": {"A171": "unemployed / unskilled non-resident", "A172": "unskilled resident",
            "A173": "skilled employee", "A174": "management / highly qualified"},
    "foreign_worker": {"A201": "yes", "A202": "no"},
}
GERMAN_EXTRA_CODES: dict[str, dict[str, str]] = {  # columns only the full German spec keeps (UCI german.doc)
    "other_debtors": {"A101": "none", "A102": "co-applicant", "A103": "guarantor"},
    "property": {"A121": "real estate", "A122": "building society savings / life insurance",
                 "A123": "car or other", "A124": "unknown / no property"},
    "other_installment_plans": {"A141": "bank", "A142": "stores", "A143": "none"},
    "own_telephone": {"A191": "none", "A192": "yes"},
}


def _ordinal(name: str, codes: dict[str, str], mutability: Mutability = "free") -> RawColumn:
    return RawColumn(name, "ordinal", mutability, tuple(codes.values()))


def _categorical(name: str, codes: dict[str, str], mutability: Mutability = "free") -> RawColumn:
    return RawColumn(name, "categorical", mutability, tuple(codes.values()))


ADULT_FEATURES = (
    RawColumn("age", "integer", "increase"),
    RawColumn("workclass", "categorical"),
    RawColumn("education-num", "ordinal", "increase", tuple(range(1, 17)), ADULT_EDUCATION),
    RawColumn("marital-status", "categorical", "immutable"),
    RawColumn("occupation", "categorical"),
    RawColumn("relationship", "categorical", "immutable"),
    RawColumn("race", "categorical", "immutable"),
    RawColumn("sex", "categorical", "immutable"),
    RawColumn("capital-gain", "real"),
    RawColumn("capital-loss", "real"),
    RawColumn("hours-per-week", "integer"),
    RawColumn("native-country", "categorical", "immutable"),
)
CREDIT_FEATURES = (
    RawColumn("isMale", "binary", "immutable", (0, 1), ("female", "male")),
    RawColumn("isMarried", "binary", "immutable", (0, 1), ("no", "yes")),
    RawColumn("AgeGroup", "ordinal", "increase", (1, 2, 3, 4), ("<25", "25-39", "40-59", ">=60")),
    RawColumn("EducationLevel", "ordinal", "increase", (1, 2, 3, 4),
               ("other", "high school", "university", "graduate school")),
    RawColumn("MaxBillAmountOverLast6Months", "real"),
    RawColumn("MaxPaymentAmountOverLast6Months", "real"),
    RawColumn("MonthsWithZeroBalanceOverLast6Months", "integer"),
    RawColumn("MonthsWithLowSpendingOverLast6Months", "integer"),
    RawColumn("MonthsWithHighSpendingOverLast6Months", "integer"),
    RawColumn("MostRecentBillAmount", "real"),
    RawColumn("MostRecentPaymentAmount", "real"),
    RawColumn("TotalOverdueCounts", "integer", "increase"),
    RawColumn("TotalMonthsOverdue", "integer", "increase"),
    RawColumn("HasHistoryOfOverduePayments", "binary", "increase", (0, 1), ("no", "yes")),
)
COMPAS_FEATURES = (
    RawColumn("AgeGroup", "ordinal", "increase", (1, 2, 3), ("<25", "25-45", ">45")),
    RawColumn("Race", "binary", "immutable", (1, 2), ("African-American", "Caucasian")),
    RawColumn("Sex", "binary", "immutable", (1, 2), ("Male", "Female")),
    RawColumn("PriorsCount", "integer", "increase"),
    RawColumn("ChargeDegree", "binary", "free", (1, 2), ("M", "F")),
)
GERMAN_FEATURES = (
    _categorical("checking_status", GERMAN_CODES["checking_status"]),
    RawColumn("duration", "integer"),
    _categorical("credit_history", GERMAN_CODES["credit_history"], "immutable"),
    _categorical("purpose", GERMAN_CODES["purpose"]),
    RawColumn("credit_amount", "integer"),
    _categorical("savings_status", GERMAN_CODES["savings_status"]),
    _ordinal("employment", GERMAN_CODES["employment"], "increase"),
    RawColumn("installment_rate", "integer"),
    _categorical("personal_status_sex", GERMAN_CODES["personal_status_sex"], "immutable"),
    RawColumn("age", "integer", "increase"),
    _categorical("housing", GERMAN_CODES["housing"]),
    RawColumn("existing_credits", "integer"),
    _ordinal("job", GERMAN_CODES["job"]),
    RawColumn("foreign_worker", "binary", "immutable", ("no", "yes")),
)
# All 20 UCI attributes (as the sequential worlds of CSCF / synth use them): GetGuarantor needs
# other_debtors, Naturalize makes foreign_worker "no" (so it may decrease here), GetUnskilledJob sets job.
_GERMAN_SHARED = {f.name: f for f in GERMAN_FEATURES}
GERMAN_FULL_FEATURES = (
    *(_GERMAN_SHARED[n] for n in ("checking_status", "duration", "credit_history", "purpose", "credit_amount",
                                  "savings_status", "employment", "installment_rate", "personal_status_sex")),
    _categorical("other_debtors", GERMAN_EXTRA_CODES["other_debtors"]),
    RawColumn("residence_since", "integer"),
    _categorical("property", GERMAN_EXTRA_CODES["property"]),
    _GERMAN_SHARED["age"],
    _categorical("other_installment_plans", GERMAN_EXTRA_CODES["other_installment_plans"]),
    _GERMAN_SHARED["housing"],
    _GERMAN_SHARED["existing_credits"],
    _GERMAN_SHARED["job"],
    RawColumn("num_dependents", "integer"),
    RawColumn("own_telephone", "binary", "free", ("none", "yes")),
    RawColumn("foreign_worker", "binary", "decrease", ("no", "yes")),
)


def _load_adult(data_dir: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI train + test, rows with '?' dropped (45,222).

    ``fnlwgt`` (a sampling weight) and the categorical ``education`` (one-to-one with
    ``education-num``, kept as the ordinal education level) are dropped.
    """
    opts = {"header": None, "names": ADULT_COLUMNS, "skipinitialspace": True, "na_values": "?"}
    parts = [pd.read_csv(data_path("adult/adult.data", data_dir), **opts),
             pd.read_csv(data_path("adult/adult.test", data_dir), skiprows=1, **opts)]
    df = pd.concat(parts, ignore_index=True).dropna().reset_index(drop=True)
    y = (df["income"].str.rstrip(".") == ">50K").to_numpy(np.int64)
    return df[[f.name for f in ADULT_FEATURES]], y


def _load_german(data_dir: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI german.data with A-codes decoded; label 1 = good credit risk."""
    df = pd.read_csv(data_path("german/german.data", data_dir), sep=" ", header=None, names=GERMAN_COLUMNS)
    for col, codes in GERMAN_CODES.items():
        unknown = set(df[col]) - set(codes)
        if unknown:
            raise ValueError(f"german.data: column {col!r} has unknown codes {sorted(unknown)}")
        df[col] = df[col].map(codes)
    y = (df["class"] == 1).to_numpy(np.int64)
    return df[[f.name for f in GERMAN_FEATURES]], y


def _load_german_full(data_dir: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI german.data with all 20 attributes decoded; label 1 = good credit risk."""
    df = pd.read_csv(data_path("german/german.data", data_dir), sep=" ", header=None, names=GERMAN_COLUMNS)
    for col, codes in {**GERMAN_CODES, **GERMAN_EXTRA_CODES}.items():
        unknown = set(df[col]) - set(codes)
        if unknown:
            raise ValueError(f"german.data: column {col!r} has unknown codes {sorted(unknown)}")
        df[col] = df[col].map(codes)
    y = (df["class"] == 1).to_numpy(np.int64)
    return df[[f.name for f in GERMAN_FULL_FEATURES]], y


def _load_compas(data_dir: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """MACE's processed COMPAS (5,278 rows); label 1 = no two-year recidivism."""
    df = pd.read_csv(data_path("compas/compas_mace_processed_geco.csv", data_dir), index_col=0)
    y = (1 - df["TwoYearRecid"]).to_numpy(np.int64)
    return df[[f.name for f in COMPAS_FEATURES]].astype(np.int64), y


def _load_credit(data_dir: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """MACE's processed Credit (29,623 rows); label 1 = no default next month."""
    df = pd.read_csv(data_path("credit/credit_processed.csv", data_dir))
    y = df["NoDefaultNextMonth (label)"].to_numpy(np.int64)
    ints = [f.name for f in CREDIT_FEATURES if f.kind != "real"]
    df[ints] = df[ints].astype(np.int64)
    return df[[f.name for f in CREDIT_FEATURES]], y


DATASETS: dict[str, DatasetSpec] = {
    "adult": DatasetSpec("adult", ADULT_FEATURES, _load_adult),
    "german": DatasetSpec("german", GERMAN_FEATURES, _load_german),
    "compas": DatasetSpec("compas", COMPAS_FEATURES, _load_compas),
    "credit": DatasetSpec("credit", CREDIT_FEATURES, _load_credit),
}
# Data sets with a second raw-feature spec for a specific world; loadable by name like DATASETS,
# kept out of DATASETS so the tabular classifier tables and their tests stay as they are.
EXTRA_DATASETS: dict[str, DatasetSpec] = {
    "german_full": DatasetSpec("german_full", GERMAN_FULL_FEATURES, _load_german_full),
}


# ------------------------------------------------------------------------------------- the files

BUNDLED_DATA_DIR = Path(__file__).resolve().parents[1] / "data"
CHECKSUMS_FILE = BUNDLED_DATA_DIR / "SHA256SUMS"
_verified: dict[Path, tuple[int, int]] = {}  # path -> (size, mtime_ns) of files already checked


def data_dir_path(data_dir: str | Path | None = None) -> Path:
    """The data directory: the argument, else ``$RECOURSE_DATA_DIR``, else the bundled ``data/``."""
    path = Path(data_dir or os.environ.get("RECOURSE_DATA_DIR") or BUNDLED_DATA_DIR)
    if not path.is_dir():
        source = "data_dir" if data_dir else "RECOURSE_DATA_DIR" if os.environ.get("RECOURSE_DATA_DIR") \
            else "bundled data"
        raise FileNotFoundError(f"{source}: {path} is not a directory")
    return path.resolve()


def checksums() -> dict[str, str]:
    """SHA-256 of each data file's (uncompressed) content, by path relative to the data directory."""
    sums = {}
    for line in CHECKSUMS_FILE.read_text().splitlines():
        if line.strip():
            digest, rel = line.split(maxsplit=1)
            sums[rel.strip()] = digest
    return sums


def data_path(rel: str, data_dir: str | Path | None = None) -> Path:
    """The file ``rel`` (e.g. ``adult/adult.data``) of the data directory, plain or ``.gz``, checked.

    Its content's SHA-256 must equal the one in ``data/SHA256SUMS``; a file is hashed once per
    process (again if it changes on disk).
    """
    root = data_dir_path(data_dir)
    path = next((p for p in (root / rel, root / f"{rel}.gz") if p.is_file()), None)
    if path is None:
        raise FileNotFoundError(f"data file {rel!r}: neither {root / rel} nor {root / rel}.gz exists")
    stat = path.stat()
    if _verified.get(path) == (stat.st_size, stat.st_mtime_ns):
        return path
    expected = checksums().get(rel)
    if expected is None:
        raise ValueError(f"data file {rel!r}: not listed in {CHECKSUMS_FILE}")
    content = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    actual = hashlib.sha256(content).hexdigest()
    if actual != expected:
        raise ValueError(f"data file {rel!r}: SHA-256 of {path} is {actual}, expected {expected} "
                         "(a corrupted or different copy; restore it or point RECOURSE_DATA_DIR elsewhere)")
    _verified[path] = (stat.st_size, stat.st_mtime_ns)
    return path


def data_text(rel: str, data_dir: str | Path | None = None) -> str:
    """The checked content of the text file ``rel`` of the data directory, decompressed."""
    path = data_path(rel, data_dir)
    raw = path.read_bytes()
    return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()


def _spec(dataset: str) -> DatasetSpec:
    spec = DATASETS.get(dataset) or EXTRA_DATASETS.get(dataset)
    if spec is None:
        raise ValueError(f"dataset: unknown data set {dataset!r} (known: {sorted(DATASETS) + sorted(EXTRA_DATASETS)})")
    return spec


def load_raw(dataset: str, data_dir: str | Path | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """The raw feature frame (the spec's columns, in order) and the 0/1 labels (1 = favourable)."""
    return _spec(dataset).load(data_dir_path(data_dir))



# --------------------------------------------------------------------- high-dimensional numeric sets

def _load_hill_valley(data_dir: Path | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI Hill-Valley with noise, training then testing (1,212 x 100); label 1 = hill."""
    parts = [pd.read_csv(data_path(f"hill_valley/Hill_Valley_with_noise_{s}.data", data_dir))
             for s in ("Training", "Testing")]
    df = pd.concat(parts, ignore_index=True)
    return df.drop(columns="class").astype(float), df["class"].to_numpy(np.int64)


def _load_arrhythmia(data_dir: Path | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI Arrhythmia (452 x 279, '?' as NaN); label 1 = normal ECG (class 1), as in the PSO paper."""
    names = data_text("arrhythmia/arrhythmia_columns.txt", data_dir).split()
    df = pd.read_csv(data_path("arrhythmia/arrhythmia.data", data_dir), header=None, names=names,
                     na_values="?")
    return df.drop(columns=names[-1]).astype(float), (df[names[-1]] == 1).to_numpy(np.int64)


def _load_lsvt(data_dir: Path | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """UCI LSVT (126 x 310 dysphonia measures + age and gender); label 1 = acceptable phonation."""
    stem = "lsvt/LSVT_voice_rehabilitation"
    X = pd.read_csv(data_path(f"{stem}_Data.csv", data_dir))
    demo = pd.read_csv(data_path(f"{stem}_Subject_demographics.csv", data_dir))
    y = pd.read_csv(data_path(f"{stem}_Binary_response.csv", data_dir)).iloc[:, 0]
    X = pd.concat([X, demo[["Age", "Gender, 0->Male, 1->Female"]]], axis=1).astype(float)
    return X, (y == 1).to_numpy(np.int64)


def _load_compas_numeric(data_dir: Path | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """ProPublica COMPAS two-year recidivism as 13 numbers, in the style of the PSO paper's COMPAS
    (its Table I: 5,238 rows, 13 continuous features; the paper does not list its columns or
    filters, so this is our reconstruction, not its data): ProPublica's filters (screening within
    30 days of arrest, a known recidivism outcome, no ordinary traffic offence) on the African-American
    and Caucasian defendants (5,278 x 13): age, the five counts and scores (juvenile felonies,
    misdemeanours and other, priors, decile and violent decile score), days between screening and
    arrest, days from the charge to COMPAS, days in jail, and sex (1 = male), race (1 =
    African-American) and charge degree (1 = felony) as 0/1 numbers; label 1 = no recidivism in two
    years (the favourable outcome)."""
    df = pd.read_csv(data_path("compas/compas-scores-two-years.csv", data_dir))
    df = df[(df["days_b_screening_arrest"].abs() <= 30) & (df["is_recid"] != -1) & (df["c_charge_degree"] != "O")
            & (df["score_text"] != "N/A") & df["race"].isin(["African-American", "Caucasian"])]
    jail = (pd.to_datetime(df["c_jail_out"]) - pd.to_datetime(df["c_jail_in"])).dt.days
    X = pd.DataFrame({
        "age": df["age"], "juv_fel_count": df["juv_fel_count"], "juv_misd_count": df["juv_misd_count"],
        "juv_other_count": df["juv_other_count"], "priors_count": df["priors_count"],
        "decile_score": df["decile_score"], "v_decile_score": df["v_decile_score"],
        "days_b_screening_arrest": df["days_b_screening_arrest"], "c_days_from_compas": df["c_days_from_compas"],
        "jail_days": jail, "sex": (df["sex"] == "Male").astype(int),
        "race": (df["race"] == "African-American").astype(int), "c_charge_degree": (df["c_charge_degree"] == "F").astype(int),
    }).reset_index(drop=True).astype(float)
    return X, (df["two_year_recid"] == 0).to_numpy(np.int64)


NUMERIC_DATASETS: dict[str, Callable[[Path | None], tuple[pd.DataFrame, np.ndarray]]] = {
    "hill_valley": _load_hill_valley, "arrhythmia": _load_arrhythmia, "lsvt": _load_lsvt,
    "compas_numeric": _load_compas_numeric,
}


def load_numeric(dataset: str, data_dir: str | Path | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """A high-dimensional all-numeric data set (MD-PSO's benchmarks): float frame, 0/1 labels."""
    if dataset not in NUMERIC_DATASETS:
        raise ValueError(f"dataset: unknown numeric data set {dataset!r} (known: {sorted(NUMERIC_DATASETS)})")
    return NUMERIC_DATASETS[dataset](data_dir_path(data_dir))

# ------------------------------------------------------------------------------------- data, models

@dataclass
class TabularData:
    """Encoded 80/20 stratified split of one data set, with its encoder."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    encoder: TabularEncoder
    fingerprint: str = ""  # hash of the raw frame, labels and split seed


def load_data(dataset: str, *, seed: int = 0, data_dir: str | Path | None = None,
              test_size: float = 0.2) -> TabularData:
    """Load, fit the encoder on the whole data set (every test row encodable) and split by ``seed``.

    A numeric data set (``NUMERIC_DATASETS``) becomes a world of free real features; its missing
    values are filled with the column's median (0 where a column has none).
    """
    if dataset in NUMERIC_DATASETS:
        df, y = load_numeric(dataset, data_dir)
        df = df.fillna(df.median()).fillna(0.0)
        features = tuple(RawColumn(str(c), "real") for c in df.columns)
    else:
        df, y = load_raw(dataset, data_dir)
        features = _spec(dataset).features
    encoder = TabularEncoder.fit(features, df)
    X = encoder.encode(df)
    train, test = train_test_split(np.arange(len(y)), test_size=test_size, stratify=y, random_state=seed)
    h = hashlib.sha256(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    h.update(y.tobytes())
    h.update(f"{seed}/{test_size}".encode())
    return TabularData(X[train], y[train], X[test], y[test], encoder, h.hexdigest()[:16])
