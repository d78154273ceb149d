"""How long a fresh service takes to answer, with numba's kernel cache empty and warm (issue 53).

    python benchmarks/cold_start.py runs/german_forest            # a clone of HEAD per start: cold, then warm
    python benchmarks/cold_start.py runs/german_forest --runs 2   # two cold clones and two warm starts

Each cold start is ``serve.py`` run from a fresh ``git clone`` of this repository (so every kernel module
has an empty ``__pycache__``: nothing compiled), the warm one from the same clone again (the cache
its cold start filled). Per start: seconds from the process's start to ``/livez`` answering (the
process listens), to ``/readyz`` = 200 (kernels compiled, run loaded), and to the first answer of
``POST /recommend`` for a rejected test record. Also the README's sequential example (its first line
of output, in a fresh clone and again). Writes ``benchmarks/results/cold_start.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.server_harness import ROOT, free_port  # noqa: E402

SEQUENTIAL_EXAMPLE = """
from data_gen.sequential_worlds import build_sequential, rejected_agents
from solvers.sequential import BRKGASequencer
built = build_sequential("adult")
x = rejected_agents(built, 1, seed=0)[0]
print(BRKGASequencer().solve(built.world, x)[0].extra["text"])
"""


def clone(into: Path) -> Path:
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(into)], check=True)
    return into


def serve_start(repo: Path, run_dir: Path, timeout: float = 900) -> dict[str, float]:
    """Start ``repo``'s serve.py on ``run_dir``; seconds to live, ready and the first answer."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(repo / "serve.py"), str(run_dir), "--port", str(port),
                             "--jobs-dir", "none", "--log-level", "warning"], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out: dict[str, float] = {}
    try:
        with httpx.Client(base_url=url, timeout=60) as c:
            while time.monotonic() - t0 < timeout:
                if proc.poll() is not None:
                    raise RuntimeError(f"serve.py exited with {proc.returncode}")
                try:
                    if "live_s" not in out and c.get("/livez").status_code == 200:
                        out["live_s"] = time.monotonic() - t0
                    if c.get("/readyz").status_code == 200:
                        out["ready_s"] = time.monotonic() - t0
                        out["ready_cpu_s"] = cpu_seconds(proc.pid)  # what a quiet machine's wall time would be
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            record = c.get("/example", params={"seed": 0}).json()["record"]
            r = c.post("/recommend", json=record)
            r.raise_for_status()
            out["first_answer_s"] = time.monotonic() - t0
            out["first_answer_status"] = r.json()["status"]
    finally:
        proc.terminate()
        proc.wait(30)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc; NaN elsewhere): on a busy machine the wall
    time is inflated by the other processes, the CPU time is not."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def sequential_first_line(repo: Path) -> float:
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", SEQUENTIAL_EXAMPLE], cwd=repo, stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    took = time.monotonic() - t0
    proc.wait(600)
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a trained tabular run (absolute or relative to this repository)")
    p.add_argument("--runs", type=int, default=1, help="cold clones (each then started warm once)")
    p.add_argument("--no-sequential", action="store_true", help="skip the README's sequential example")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cold_start"))
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir).resolve()
    rows = []
    with tempfile.TemporaryDirectory(prefix="cold-start-") as tmp:
        for i in range(args.runs):
            repo = clone(Path(tmp) / f"clone{i}")
            for cache in ("cold", "warm"):
                r = {"cache": cache, **serve_start(repo, run_dir)}
                if not args.no_sequential:
                    r["sequential_first_line_s"] = sequential_first_line(repo)
                rows.append(r)
                print(json.dumps(r), flush=True)
    lines = ["| cache | live (s) | ready (s) | CPU s to ready | first answer (s) | README sequential example, "
             "first line (s) |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['cache']} | {r['live_s']:.2f} | {r['ready_s']:.1f} | {r['ready_cpu_s']:.1f} | "
                     f"{r['first_answer_s']:.1f} | "
                     f"{r.get('sequential_first_line_s', float('nan')):.1f} |")
    meta = {"run": run_dir.name, "cpus": os.cpu_count(), "load_average": os.getloadavg(), "rows": rows}
    Path(args.out + ".json").write_text(json.dumps(meta, indent=1))
    Path(args.out + ".md").write_text(f"Run {run_dir.name}, {os.cpu_count()} CPUs, load average at the end "
                                      f"{os.getloadavg()[0]:.1f}.\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
