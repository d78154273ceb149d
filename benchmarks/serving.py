"""Serving benchmark: latency, batch throughput and a fuzz run against ``serve.py``, on loopback.

    python benchmarks/serving.py [--run-dir runs/NAME] [--model NAME] [--single 2000] [--batch-size 1000]
                                 [--batches 20] [--fuzz 3000] [--phase-seconds 120] [--out results.json]

Starts ``serve.py`` in a subprocess on 127.0.0.1 (a free port), waits for /health, then

- single: sequential POST /recommend with one keep-alive ``httpx.Client`` -> p50/p90/p99/max ms,
  overall and by answering method, beside GET /health (no work) as the HTTP baseline;
- batch: POST /recommend/batch with ``--batch-size`` agents -> agents/s, per-batch p50/max ms;
- fuzz: malformed requests (wrong lengths, strings, NaN/inf, huge numbers, nested junk, bad
  JSON, random bytes, oversize batches and bodies, bad groups, extra keys, wrong content types)
  -> counts of 2xx/4xx/5xx and transport errors, per category; the server must still be healthy;

then reads /model's counters, stops the server and prints JSON. Agents are the run dataset's
kept agents (negatively classified, optimal CFE of at most 3 actions) plus 10% fresh random ones.
Without ``--run-dir`` a small run is built under a temporary directory: a 20-feature synthetic
set (10,000 agents) and a named-CFE MLP trained for a few epochs. Every loop is bounded in
count and in time (``--phase-seconds``); only loopback traffic.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.server_harness import free_port, start_server, stop_server  # noqa: E402
from benchmarks.warmup import warming_up  # noqa: E402
from data_gen.dataset import load_dataset  # noqa: E402
from evaluation.config import parse_config  # noqa: E402
from evaluation.experiment import train_experiment  # noqa: E402

TARGETS = {"single_p99_ms": 10.0, "batch_agents_per_s": 1000.0, "fuzz_5xx": 0}


def build_run(workdir: Path, method: str) -> Path:
    params = {"hamming_knn": {"k": 5}, "named_cfe": {"hidden": [256, 256], "max_epochs": 20, "patience": 3}}
    cfg = parse_config({
        "name": "serving_bench", "data_dir": str(workdir / "data"), "output_dir": str(workdir / "runs"),
        "dataset": {"n_features": 20, "n_agents": 10_000, "seed": 0},
        "generators": [{"method": method, "params": params.get(method, {})}]})
    return train_experiment(cfg, progress=False, log=lambda msg: print(msg, file=sys.stderr))


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def bench_single(client: httpx.Client, X: np.ndarray, n: int, seconds: float) -> dict:
    with warming_up("POST /recommend, 50 requests"):
        for x in X[:50]:
            client.post("/recommend", json={"x": x.tolist()})
    lat, codes, by_method = [], {}, {}
    t_end = time.monotonic() + seconds
    for i in range(n):
        if time.monotonic() > t_end:
            break
        body = {"x": X[i % len(X)].tolist()}
        t = time.perf_counter()
        r = client.post("/recommend", json=body)
        lat.append(1e3 * (time.perf_counter() - t))
        codes[r.status_code] = codes.get(r.status_code, 0) + 1
        by_method.setdefault(r.json().get("method", "error"), []).append(lat[-1])
    return {"requests": len(lat), "status_codes": codes, "p50_ms": pct(lat, 50), "p90_ms": pct(lat, 90),
            "p99_ms": pct(lat, 99), "max_ms": max(lat), "mean_ms": float(np.mean(lat)),
            "by_method": {m: {"requests": len(v), "p50_ms": pct(v, 50), "p99_ms": pct(v, 99)}
                          for m, v in by_method.items()}}


def bench_baseline(client: httpx.Client, n: int, seconds: float) -> dict:
    """GET /health (no work) in the same run: what HTTP and this machine's scheduling cost alone."""
    lat = []
    t_end = time.monotonic() + seconds
    for _ in range(n):
        if time.monotonic() > t_end:
            break
        t = time.perf_counter()
        client.get("/health")
        lat.append(1e3 * (time.perf_counter() - t))
    return {"requests": len(lat), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99)}


def batch_body(X: np.ndarray) -> dict:
    """A /recommend/batch body: one object per agent (a world without groups needs no ``group``)."""
    return {"agents": [{"x": x} for x in X.tolist()]}


def bench_batch(client: httpx.Client, X: np.ndarray, size: int, n: int, seconds: float) -> dict:
    rng = np.random.default_rng(1)
    with warming_up(f"POST /recommend/batch, one batch of {size}"):
        client.post("/recommend/batch", json=batch_body(X[:size]))
    lat, agents, statuses = [], 0, {}
    t_end = time.monotonic() + seconds
    t0 = time.perf_counter()
    for _ in range(n):
        if time.monotonic() > t_end:
            break
        body = batch_body(X[rng.choice(len(X), size)])
        t = time.perf_counter()
        r = client.post("/recommend/batch", json=body)
        lat.append(1e3 * (time.perf_counter() - t))
        r.raise_for_status()
        agents += size
        for k, v in r.json()["counts"].items():
            statuses[k] = statuses.get(k, 0) + v
    total = time.perf_counter() - t0
    return {"batches": len(lat), "batch_size": size, "agents": agents, "agents_per_s": agents / total,
            "batch_p50_ms": pct(lat, 50), "batch_max_ms": max(lat), "statuses": statuses}


def fuzz_cases(rng: np.random.Generator, n: int, max_batch: int):
    """Yield (category, method, path, content bytes, content type) for malformed requests."""

    def junk(depth: int = 0):
        k = rng.integers(0, 8 if depth < 4 else 5)
        if k == 0:
            return int(rng.integers(-10**6, 10**6))
        if k == 1:
            return float(rng.normal() * 10.0 ** int(rng.integers(-5, 300)))
        if k == 2:
            return "".join(chr(c) for c in rng.integers(32, 0x2FFF, rng.integers(0, 12)))
        if k == 3:
            return [None, True, False][rng.integers(0, 3)]
        if k == 4:
            return None
        if k == 5:
            return [junk(depth + 1) for _ in range(rng.integers(0, 6))]
        return {str(junk(depth + 1))[:10]: junk(depth + 1) for _ in range(rng.integers(0, 4))}

    J = "application/json"
    bits = lambda m: rng.integers(0, 2, m).tolist()  # noqa: E731
    dump = lambda o: json.dumps(o).encode()  # noqa: E731
    gens = {
        "wrong_length": lambda: ("POST", "/recommend", dump({"x": bits(int(rng.choice([0, 1, 19, 21, 200])))}), J),
        "strings": lambda: ("POST", "/recommend", dump({"x": [str(b) for b in bits(20)]}), J),
        "nan_inf": lambda: ("POST", "/recommend", json.dumps(
            {"x": bits(19) + [float(rng.choice([np.nan, np.inf, -np.inf]))]}).encode(), J),
        "huge_numbers": lambda: ("POST", "/recommend", (
            '{"x": [' + ",".join(["0"] * 19 + [str(rng.choice(["1e400", "-1e400", "1e308", "9" * 400, "1.5"]))])
            + "]}").encode(), J),
        "nested_junk": lambda: ("POST", str(rng.choice(["/recommend", "/recommend/batch"])),
                                dump(junk() if rng.random() < 0.5 else {"x": junk(), "agents": junk()}), J),
        "deep_nesting": lambda: ("POST", "/recommend", b'{"x": ' + b"[" * (d := int(rng.integers(100, 100_000)))
                                 + b"]" * d + b"}", J),
        "bad_json": lambda: ("POST", "/recommend/batch",
                             dump({"agents": [{"x": bits(20)}]})[: int(rng.integers(0, 30))] + b"}{,", J),
        "random_bytes": lambda: ("POST", str(rng.choice(["/recommend", "/recommend/batch"])),
                                 rng.bytes(int(rng.integers(0, 4000))), J),
        "bad_groups": lambda: ("POST", "/recommend", dump({"x": bits(20), "group": [
            -1, 1, 10**9, "0", 0.5, True, [0], {"g": 0}][rng.integers(0, 8)]}), J),
        "batch_shape": lambda: ("POST", "/recommend/batch", dump([
            {"agents": []}, {"agents": [{"x": bits(20)}, {"x": bits(19)}]}, {"agents": [{"x": bits(20), "group": 1}]},
            {"agents": bits(20)}, {"agents": [bits(20)]}, {"agents": [{"x": bits(20)}], "groups": [0]}
        ][rng.integers(0, 6)]), J),
        "extra_keys": lambda: ("POST", "/recommend", dump({"x": bits(20), "xx": 1, "groups": [0]}), J),
        "content_type": lambda: ("POST", "/recommend", dump({"x": bits(20)}),
                                 str(rng.choice(["text/plain", "application/x-www-form-urlencoded", ""]))),
        "wrong_route": lambda: (str(rng.choice(["GET", "PUT", "DELETE"])), "/recommend", b"", J),
        "oversize_batch": lambda: ("POST", "/recommend/batch", dump(
            {"agents": [{"x": [0] * 20}] * (max_batch + int(rng.integers(1, 100)))}), J),
        "oversize_body": lambda: ("POST", "/recommend/batch", b" " * (8_000_000 + int(rng.integers(0, 1000))), J),
    }
    heavy = {"oversize_batch", "oversize_body"}  # a few of these (megabytes each)
    names = list(gens)
    for i in range(n):
        name = names[i % len(names)]
        if name in heavy and i // len(names) >= 10:
            name = "nested_junk"
        yield (name, *gens[name]())


def bench_fuzz(client: httpx.Client, n: int, max_batch: int, seconds: float) -> dict:
    rng = np.random.default_rng(2)
    per: dict[str, dict[str, int]] = {}
    totals = {"2xx": 0, "4xx": 0, "5xx": 0, "transport_error": 0}
    examples_5xx = []
    t_end = time.monotonic() + seconds
    sent = 0
    for name, method, path, content, ctype in fuzz_cases(rng, n, max_batch):
        if time.monotonic() > t_end:
            break
        headers = {"content-type": ctype} if ctype else {}
        try:
            r = client.request(method, path, content=content, headers=headers)
            key = f"{r.status_code // 100}xx"
            if r.status_code >= 500 and len(examples_5xx) < 5:
                examples_5xx.append({"case": name, "status": r.status_code, "body": r.text[:300]})
        except httpx.TransportError:
            key = "transport_error"
        sent += 1
        totals[key] = totals.get(key, 0) + 1
        per.setdefault(name, {})
        per[name][key] = per[name].get(key, 0) + 1
    return {"requests": sent, **totals, "by_case": per, "examples_5xx": examples_5xx}


def main(argv=None) -> int:
    if "--page" in (sys.argv[1:] if argv is None else argv):  # the recommendation page (issue 37)
        return page_main(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", default=None, help="a trained run (default: build a small one in a temp dir)")
    p.add_argument("--model", default=None, help="model of the run to serve (default: its first generator)")
    p.add_argument("--method", default="named_cfe", choices=["named_cfe", "hamming_knn"],
                   help="generator of the run built when --run-dir is not given")
    p.add_argument("--single", type=int, default=2000, help="sequential single-agent requests")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--fuzz", type=int, default=3000, help="malformed requests")
    p.add_argument("--max-batch", type=int, default=10_000, help="the server's max_batch")
    p.add_argument("--phase-seconds", type=float, default=120.0, help="time limit of each phase")
    p.add_argument("--work-dir", default=None, help="build the run here and keep it (default: a temporary dir)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    p.add_argument("--tabular", default=None, metavar="RUN_DIR", nargs="+",
                   help="benchmark tabular runs instead (benchmarks/serving_tabular.py): in-process latency, "
                        "batch throughput, validity, share at MACE's optimum, fallback rates, fuzz + schemathesis")
    p.add_argument("--tabular-config", default=None, metavar="CONFIG",
                   help="train this tabular config (configs/german_forest.yaml) into --work-dir first, then benchmark it")
    p.add_argument("--budget-ms", type=float, default=50.0, help="tabular: the fallback budget per request")
    p.add_argument("--no-schemathesis", action="store_true", help="tabular: skip the schemathesis run")
    p.add_argument("--results", default=None, help="tabular: write RESULTS.json and RESULTS.md "
                                                   "(e.g. benchmarks/results/serving)")
    p.add_argument("--batch-under-load", default=None, metavar="RUN_DIR", nargs="+",
                   help="tabular runs: single-request and /health latency over loopback while a --max-batch batch "
                        "runs, sent as POST /recommend/batch and as a job (benchmarks/serving_load.py); with "
                        "--results, written to RESULTS_load.json / .md")
    p.add_argument("--repeat", type=int, default=1, help="--batch-under-load: runs per run directory (fresh servers)")
    args = p.parse_args(argv)
    if args.batch_under_load:
        return load_main(args, argv)
    if args.tabular or args.tabular_config:
        return tabular_main(args, argv)

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="serving-bench-") as tmp:
        t0 = time.perf_counter()
        run_dir = Path(args.run_dir) if args.run_dir else build_run(Path(args.work_dir or tmp), args.method)
        build_s = time.perf_counter() - t0
        info = json.loads((run_dir / "dataset.json").read_text())
        ds = load_dataset(info["path"])
        rng = np.random.default_rng(0)
        fresh = (rng.random((max(1, len(ds.X) // 10), ds.world.n_features)) < ds.config.pf).astype(np.uint8)
        X = np.concatenate([ds.X, fresh])[rng.permutation(len(ds.X) + len(fresh))]
        if ds.world.n_groups > 1:
            raise SystemExit("benchmarks/serving.py: use a run whose world has no groups")
        port = free_port()
        t0 = time.perf_counter()
        log = Path(tmp) / "server.log"
        proc = start_server(run_dir, args.model, port, args.max_batch, log, timeout=300)
        startup_s = time.perf_counter() - t0
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60.0) as client:
                single = bench_single(client, X, args.single, args.phase_seconds)
                baseline = bench_baseline(client, args.single, args.phase_seconds)
                batch = bench_batch(client, X, args.batch_size, args.batches, args.phase_seconds)
                fuzz = bench_fuzz(client, args.fuzz, args.max_batch, args.phase_seconds)
                healthy = client.get("/health").status_code == 200
                model = client.get("/model").json()
        finally:
            stop_server(proc)
        server_log = log.read_text()
    result = {
        "run_dir": str(run_dir) if args.run_dir or args.work_dir else "(temporary, built by the benchmark)",
        "model": model["model"], "method": model["method"], "world": model["world"] | {"feature_names": None},
        "model_metrics_accuracy": (model.get("metrics") or {}).get("accuracy"),
        "cpu_count": os.cpu_count(), "loadavg_1min_before": load_before[0], "loadavg_1min_after": os.getloadavg()[0],
        "build_run_s": build_s, "server_startup_s": startup_s,
        "single": single, "http_baseline_get_health": baseline, "batch": batch, "fuzz": fuzz, "healthy_after_fuzz": healthy,
        "server_counters": model["counters"],
        "server_errors_logged": server_log.count("ERROR"),
        "targets": TARGETS,
        "meets_targets": {"single_p99_ms": single["p99_ms"] <= TARGETS["single_p99_ms"],
                          "batch_agents_per_s": batch["agents_per_s"] >= TARGETS["batch_agents_per_s"],
                          "fuzz_5xx": fuzz["5xx"] == 0 and fuzz["transport_error"] == 0 and healthy},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


def tabular_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    from benchmarks.serving_tabular import bench_tabular, markdown

    run_dirs = [Path(r) for r in args.tabular or []]
    if args.tabular_config:
        from evaluation.tabular_experiment import load_tabular_config, train_tabular

        cfg = load_tabular_config(args.tabular_config)
        cfg = cfg.model_copy(update={"output_dir": str(Path(args.work_dir or "runs"))})
        run_dirs.append(train_tabular(cfg, progress=False))
    command = "python benchmarks/serving.py " + " ".join(sys.argv[1:] if argv is None else argv)
    results = {}
    for run_dir in run_dirs:
        load_before = os.getloadavg()
        r = bench_tabular(run_dir, args.single, args.batch_size, args.batches, args.fuzz, args.budget_ms,
                          not args.no_schemathesis)
        r["cpu_count"], r["loadavg_1min_before"] = os.cpu_count(), load_before[0]
        r["loadavg_1min_after"], r["command"] = os.getloadavg()[0], command
        results[r["run"]] = r
    text = json.dumps(results, indent=2, default=str)
    print(text)
    if args.results:
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results + ".json").write_text(text)
        Path(args.results + ".md").write_text("\n".join(markdown(r, command) for r in results.values()))
    return 0


PAGE_TARGET_P99_MS = 100.0  # issue 37: page load and answer on loopback
PAGE_ASSETS = ("/", "/page.js", "/page.css", "/schema")  # what a browser fetches to show the form


def page_main(argv: list[str] | None = None) -> int:
    """``--page RUN_DIR``: the recommendation page of a tabular run, served by ``serve.py`` on loopback.

    Page load = the four requests a browser makes to show the form (``GET /``, ``/page.js``,
    ``/page.css``, ``/schema``), one after another on one keep-alive connection; answer = ``POST
    /recommend`` of a rejected test record (from ``GET /example?seed=i``) as the page first sends it
    (``n_diverse`` 0); alternatives = the page's second request, with ``n_diverse`` (reported apart:
    it may wait up to the fallback budget for GeCo). p50/p99/max of each and of load + answer per
    visit, against the 100 ms p99 target.
    """
    p = argparse.ArgumentParser(description=page_main.__doc__)
    p.add_argument("--page", required=True, metavar="RUN_DIR", help="a trained tabular run directory")
    p.add_argument("--visits", type=int, default=300, help="page loads and answers measured (after 10 warm-up visits)")
    p.add_argument("--n-diverse", type=int, default=2, help="alternatives asked for after the answer, as the page "
                                                         "asks by default (0: none)")
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="page-bench-") as tmp:
        port, log = free_port(), Path(tmp) / "server.log"
        proc = start_server(Path(args.page), None, port, 10_000, log, timeout=300)
        load_ms, answer_ms, alt_ms, statuses, seen = [], [], [], {}, set()
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60.0) as client:

                def visit(i: int) -> tuple[float, float, float, httpx.Response]:
                    record = client.get("/example", params={"seed": i}).json()["record"]
                    seen.add(json.dumps(record, sort_keys=True))
                    t0 = time.perf_counter()
                    for path in PAGE_ASSETS:
                        client.get(path).raise_for_status()
                    t1 = time.perf_counter()
                    r = client.post("/recommend", json={**record, "n_diverse": 0})
                    t2 = time.perf_counter()
                    r.raise_for_status()
                    if args.n_diverse and r.json()["status"] == "ok":
                        client.post("/recommend", json={**record, "n_diverse": args.n_diverse}).raise_for_status()
                    return t1 - t0, t2 - t1, time.perf_counter() - t2, r

                with warming_up("the page, 10 visits"):
                    for i in range(10):
                        visit(i)
                for i in range(10, 10 + args.visits):
                    load, answer, alt, r = visit(i)
                    load_ms.append(load * 1e3)
                    answer_ms.append(answer * 1e3)
                    alt_ms.append(alt * 1e3)
                    key = f"{r.json()['status']}/{r.json()['method']}"
                    statuses[key] = statuses.get(key, 0) + 1
                model = client.get("/model").json()
        finally:
            stop_server(proc)
    visit = [a + b for a, b in zip(load_ms, answer_ms, strict=True)]

    def summary(v: list[float]) -> dict:
        return {"p50_ms": pct(v, 50), "p99_ms": pct(v, 99), "max_ms": max(v), "n": len(v)}

    result = {"run": model["run"], "generator": model["generator"], "dataset": model["dataset"],
              "model_class": model["model_class"], "n_diverse": args.n_diverse, "distinct_records": len(seen), "cpu_count": os.cpu_count(),
              "loadavg_1min_after": os.getloadavg()[0], "page_load": summary(load_ms), "answer": summary(answer_ms),
              "load_and_answer": summary(visit), "alternatives": summary(alt_ms), "answers": statuses, "target_p99_ms": PAGE_TARGET_P99_MS,
              "meets_target": pct(visit, 99) <= PAGE_TARGET_P99_MS}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


def load_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    from benchmarks.serving_load import bench_batch_under_load, markdown

    command = "python benchmarks/serving.py " + " ".join(sys.argv[1:] if argv is None else argv)
    from benchmarks.serving_load import repeat_summary

    results = {}
    for run_dir in map(Path, args.batch_under_load):
        for k in range(args.repeat):  # each a fresh server (the issue: 5 runs, all of them within the targets)
            r = bench_batch_under_load(run_dir, max_batch=args.max_batch)
            r["command"] = command
            results[r["run"] + (f" #{k + 1}" if args.repeat > 1 else "")] = r
    text = json.dumps(results, indent=2, default=str)
    print(text)
    if args.results:
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results + "_load.json").write_text(text)
        Path(args.results + "_load.md").write_text(repeat_summary(results) + "\n" +
                                                   "\n".join(markdown(r, command) for r in results.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
