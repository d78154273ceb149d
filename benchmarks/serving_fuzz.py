"""No 5xx on bad input, keys on and off (issue 57): schemathesis with its stateful phase, and a hand fuzz.

    python benchmarks/serving_fuzz.py runs/german_forest_small [--per-route 300] [--max-examples 40]

For keys off and keys on (``RECOURSE_API_KEYS``, the rate limit raised so that it does not shape the
fuzz: it has its own test), a real ``serve.py`` on loopback:

1. **schemathesis** (the ``st`` CLI, every check, every phase: examples, coverage, fuzzing and the
   stateful phase, which chains ``POST /jobs`` -> ``GET``/``DELETE /jobs/{id}`` through the schema's
   links), with the key as a header when keys are on; its JUnit report gives the failures;
2. a **hand fuzz** of ``--per-route`` malformed requests per route (bodies that are not JSON, nested
   1,000 to 100,000 levels, 2 MB strings, wrong types, unknown and missing fields, NaN literals, wrong
   content types, garbage path and query parameters, and with keys on: no header, a malformed one, a
   wrong key), all on one keep-alive connection; after each request that is not a probe, a valid
   ``GET /health`` on the same connection must answer 200 (the connection stays usable).

Writes ``benchmarks/results/serving_fuzz.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.server_harness import free_port, start_server, stop_server  # noqa: E402

KEY = "fuzz-key-0123456789"
OUT = Path("benchmarks/results")


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def bodies(rng: random.Random, record: dict[str, Any]) -> list[tuple[str, bytes, str]]:
    """(category, body, content type) of malformed request bodies."""
    name = next(iter(record))
    out = [("not json", b"{not json", "application/json"), ("empty", b"", "application/json"),
           ("json null", b"null", "application/json"), ("a list", b"[1,2,3]", "application/json"),
           ("NaN literal", json.dumps({**record, name: "__NAN__"}).replace('"__NAN__"', "NaN").encode(), "application/json"),
           ("Infinity", json.dumps({**record, name: "__INF__"}).replace('"__INF__"', "1e999").encode(), "application/json"),
           ("2 MB string", json.dumps({**record, name: "x" * 2_000_000}).encode(), "application/json"),
           ("wrong content type", json.dumps(record).encode(), "text/plain"),
           ("form body", b"a=1&b=2", "application/x-www-form-urlencoded"),
           ("unknown field", json.dumps({**record, "zzz_unknown": 1}).encode(), "application/json"),
           ("missing field", json.dumps({k: v for k, v in record.items() if k != name}).encode(), "application/json"),
           ("wrong type", json.dumps({**record, name: {"x": [1]}}).encode(), "application/json"),
           ("bad utf-8", b'{"\xff\xfe": 1}', "application/json"),
           ("records not a list", json.dumps({"records": record}).encode(), "application/json"),
           ("records of junk", json.dumps({"records": [1, "a", None, []]}).encode(), "application/json")]
    for depth in (1_000, 10_000, 100_000):
        out.append((f"nested {depth:,}", nested(depth), "application/json"))
        out.append((f"nested list {depth:,}", b"[" * depth + b"]" * depth, "application/json"))
    while len(out) < 40:  # random byte soup and mutated records
        if rng.random() < 0.5:
            out.append(("random bytes", bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300))), "application/json"))
        else:
            k = rng.choice(list(record))
            v = rng.choice([-1e308, 1e308, -1, 0, "", "🙂" * 50, True, None, [], {}, 2**70])
            out.append(("mutated value", json.dumps({**record, k: v}).encode(), "application/json"))
    return out


def routes(openapi: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m.upper(), p) for p, ops in openapi["paths"].items() for m in ops]


def hand_fuzz(base: str, per_route: int, keys_on: bool, record: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    rng = random.Random(seed)
    good = {"Authorization": f"Bearer {KEY}"} if keys_on else {}
    out: dict[str, Any] = {}
    with httpx.Client(base_url=base, timeout=60.0) as c:  # one keep-alive connection
        openapi = c.get("/openapi.json").json()
        job = c.post("/jobs", json={"records": [record]}, headers=good)
        job_id = job.json().get("id", "none") if job.status_code == 202 else "none"
        for method, path in routes(openapi):
            codes: Counter[int] = Counter()
            broken = 0
            body_list = bodies(rng, record)
            paths = [path.replace("{job_id}", j) for j in (job_id, "../../etc/passwd", "x" * 5000, "%00", "😀", "-1")] \
                if "{job_id}" in path else [path]
            queries = [{}, {"offset": "-1"}, {"limit": "abc"}, {"offset": str(2**70)}, {"limit": "1e9"},
                       {"seed": "nan"}, {"zzz": "1" * 5000}]
            auth = [good] if not keys_on else [good, {}, {"Authorization": "Bearer"}, {"Authorization": "Basic abc"},
                                               {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer " + "k" * 10000}]
            for i in range(per_route):
                h = dict(rng.choice(auth))
                url = rng.choice(paths)
                params = rng.choice(queries)
                if method in ("POST", "PUT", "PATCH"):
                    cat, body, ctype = body_list[i % len(body_list)]
                    h["Content-Type"] = ctype
                    r = c.request(method, url, content=body, headers=h, params=params)
                else:
                    r = c.request(method, url, headers=h, params=params)
                codes[r.status_code] += 1
                if c.get("/health").status_code != 200:
                    broken += 1
            out[f"{method} {path}"] = {"requests": per_route, "2xx": sum(v for k, v in codes.items() if k < 300),
                                       "4xx": sum(v for k, v in codes.items() if 400 <= k < 500),
                                       "5xx": sum(v for k, v in codes.items() if k >= 500), "connection_broken": broken,
                                       "codes": {str(k): v for k, v in sorted(codes.items())}}
    return out


def schemathesis_run(base: str, keys_on: bool, max_examples: int, workdir: Path) -> dict[str, Any]:
    junit = workdir / f"junit-{'on' if keys_on else 'off'}.xml"
    cmd = [str(Path(sys.executable).parent / "st"), "run", f"{base}/openapi.json", "--checks", "all",
           "--max-examples", str(max_examples), "--report", "junit", "--report-junit-path", str(junit),
           "--seed", "0", "--workers", "1"]
    if keys_on:
        cmd += ["-H", f"Authorization: Bearer {KEY}"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    tests = failures = errors = 0
    if junit.exists():
        root = ET.parse(junit).getroot()
        for suite in root.iter("testsuite"):
            tests += int(suite.get("tests", 0))
            failures += int(suite.get("failures", 0))
            errors += int(suite.get("errors", 0))
    tail = proc.stdout[-3000:]
    return {"exit_code": proc.returncode, "operations": tests, "failures": failures, "errors": errors,
            "seconds": time.perf_counter() - t, "summary": tail}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", nargs="?", default="runs/german_forest_small", help="a trained tabular run")
    p.add_argument("--per-route", type=int, default=300, help="malformed requests per route and key mode")
    p.add_argument("--max-examples", type=int, default=40, help="schemathesis examples per operation and phase")
    p.add_argument("--out", default=str(OUT), help="results directory")
    p.add_argument("--report-only", action="store_true", help="rewrite the Markdown from the JSON")
    args = p.parse_args(argv)
    if args.report_only:
        r = json.loads((Path(args.out) / "serving_fuzz.json").read_text())
        (Path(args.out) / "serving_fuzz.md").write_text(report(r))
        print(report(r))
        return
    results: dict[str, Any] = {"run": args.run_dir, "per_route": args.per_route, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for keys_on in (False, True):
            port = free_port()
            if keys_on:
                os.environ["RECOURSE_API_KEYS"] = KEY
            else:
                os.environ.pop("RECOURSE_API_KEYS", None)
            proc = start_server(Path(args.run_dir), None, port, 50, tmp / "server.log", 600.0,
                                extra=["--rate-limit", "100000"])
            base = f"http://127.0.0.1:{port}"
            try:
                httpx.get(f"{base}/readyz", timeout=600.0)
                ex = httpx.get(f"{base}/example", timeout=60.0, headers={"Authorization": f"Bearer {KEY}"} if keys_on else {})
                record = ex.json().get("record") if ex.status_code == 200 else None
                if not record:
                    schema = httpx.get(f"{base}/openapi.json").json()
                    props = schema["components"]["schemas"]
                    raise SystemExit(f"no example record from {base}/example ({ex.status_code}); schemas: {list(props)}")
                mode = "on" if keys_on else "off"
                print(f"keys {mode}: schemathesis ...", flush=True)
                st = schemathesis_run(base, keys_on, args.max_examples, tmp)
                print(f"keys {mode}: schemathesis {st['failures']} failures, {st['errors']} errors "
                      f"({st['seconds']:.0f} s); hand fuzz ...", flush=True)
                fuzz = hand_fuzz(base, args.per_route, keys_on, record)
                alive = httpx.get(f"{base}/health").status_code == 200
            finally:
                stop_server(proc)
            results["modes"][mode] = {"schemathesis": st, "hand_fuzz": fuzz, "healthy_after": alive}
            print(f"keys {mode}: 5xx {sum(v['5xx'] for v in fuzz.values())} in "
                  f"{sum(v['requests'] for v in fuzz.values())} requests", flush=True)
    os.environ.pop("RECOURSE_API_KEYS", None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serving_fuzz.json").write_text(json.dumps(results, indent=1))
    (out / "serving_fuzz.md").write_text(report(results))
    print(report(results))


def report(r: dict[str, Any]) -> str:
    lines = ["# No 5xx on bad input, keys on and off (`benchmarks/serving_fuzz.py`)", "",
             f"Run `{r['run']}`, a real `serve.py` on loopback per mode. schemathesis: every check, every phase "
             "(stateful included). Hand fuzz: malformed requests per route on one keep-alive connection, a "
             "`GET /health` on the same connection after each.", "",
             "| keys | schemathesis cases (stateful scenarios) | failures | errors | exit | route | requests | 2xx | 4xx | 5xx | connection broken |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for mode, m in r["modes"].items():
        st = m["schemathesis"]
        cases = re.search(r"(\d+) generated", st["summary"])
        scen = re.search(r"Scenarios:\s+(\d+)", st["summary"])
        count = f"{cases.group(1) if cases else '?'} ({scen.group(1) if scen else '?'})"
        for i, (route, f) in enumerate(m["hand_fuzz"].items()):
            head = (f"| {mode} | {count} | {st['failures']} | {st['errors']} | {st['exit_code']} "
                    if i == 0 else "| | | | | ")
            lines.append(f"{head}| {route} | {f['requests']} | {f['2xx']} | {f['4xx']} | **{f['5xx']}** | "
                         f"{f['connection_broken']} |")
    tot = sum(f["5xx"] for m in r["modes"].values() for f in m["hand_fuzz"].values())
    n = sum(f["requests"] for m in r["modes"].values() for f in m["hand_fuzz"].values())
    lines += ["", f"Hand fuzz: **{tot} 5xx in {n:,} requests**; healthy after each mode: "
              + ", ".join(f"{k} {v['healthy_after']}" for k, v in r["modes"].items()) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
