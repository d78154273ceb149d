"""The metrics as a monitoring system reads them (issue 57): ``/metrics`` scraped and parsed back.

    python benchmarks/metrics_readback.py runs/german_forest_small [--requests 40]

Starts ``serve.py`` on loopback, sends a mix of traffic (single requests, a batch, a job polled to its
end, a 422, a 404), scrapes ``/metrics`` twice and parses the exposition text with
``prometheus_client.parser`` (the text format Prometheus scrapes). Writes
``benchmarks/results/metrics_readback.md`` (every family with its type and help, and the samples that
moved between the scrapes) and the raw exposition text beside it (``metrics_readback.txt``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.server_harness import free_port, start_server, stop_server  # noqa: E402

OUT = Path("benchmarks/results")


def samples(text: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def main(argv: list[str] | None = None) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", nargs="?", default="runs/german_forest_small", help="a trained tabular run")
    p.add_argument("--requests", type=int, default=40, help="single requests between the scrapes")
    p.add_argument("--out", default=str(OUT), help="results directory")
    args = p.parse_args(argv)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_server(Path(args.run_dir), None, port, 1000, Path(tmp) / "server.log", 900.0)
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, timeout=120.0) as c:
                while c.get("/readyz").status_code != 200:
                    time.sleep(0.5)
                before = c.get("/metrics").text
                record = c.get("/example").json()["record"]
                for _ in range(args.requests):
                    c.post("/recommend", json=record)
                c.post("/recommend/batch", json={"records": [record] * 20})
                job = c.post("/jobs", json={"records": [record] * 30}).json()
                while c.get(f"/jobs/{job['id']}").json().get("status") not in ("done", "failed"):
                    time.sleep(0.2)
                c.post("/recommend", json={"nope": 1})  # 422
                c.get("/jobs/does-not-exist")  # 404
                after = c.get("/metrics").text
        finally:
            stop_server(proc)
    fams = list(text_string_to_metric_families(after))
    a, b = samples(before), samples(after)
    moved = [(k, b[k] - a.get(k, 0.0)) for k in sorted(b) if b[k] != a.get(k, 0.0) and not k[0].endswith("_created")]
    lines = ["# `/metrics` scraped and parsed back (`benchmarks/metrics_readback.py`)", "",
             f"`serve.py {args.run_dir}`; {args.requests} single requests, a 20-record batch, a 30-record job "
             "polled to its end, a 422 and a 404 between two scrapes; the exposition text parsed with "
             "`prometheus_client.parser.text_string_to_metric_families` (the format Prometheus scrapes; the raw "
             "text is in `metrics_readback.txt`).", "", f"## {len(fams)} metric families", "",
             "| family | type | help |", "|---|---|---|"]
    lines += [f"| `{f.name}` | {f.type} | {f.documentation} |" for f in fams if not f.name.startswith(("python_", "process_"))]
    lines += ["", "## Samples that moved between the scrapes (histogram buckets left out)", "",
              "| sample | labels | change |", "|---|---|---:|"]
    for (name, labels), delta in moved:
        if name.endswith("_bucket"):
            continue
        lab = ", ".join(f"{k}={v}" for k, v in labels)
        lines.append(f"| `{name}` | {lab} | {delta:g} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics_readback.md").write_text("\n".join(lines) + "\n")
    (out / "metrics_readback.txt").write_text(after)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
