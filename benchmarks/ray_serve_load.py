"""Ray Serve under load, one replica killed (issue 57 item 1): ``python benchmarks/ray_serve_load.py [RUN_DIR]``.

A tabular run (default ``runs/german_forest_small``), on this machine, through the real command lines:

1. ``serve.py RUN_DIR`` (one process): its answers to ``--records`` records (1,000; rejected records the
   run's generator answers itself, so that no time-budgeted fallback makes an answer timing-dependent),
   then ``--baseline-s`` seconds of load by ``--threads`` client threads (latency and throughput to
   compare with);
2. ``serve.py RUN_DIR --ray-serve --replicas 2 --address local``: the same records' answers, compared
   with the single process's minus ``latency_ms`` (identical, or the differing ones listed), then
   ``--load-s`` seconds (60) of the same load over every rejected record of the run (fallbacks included),
   and at ``--kill-at`` seconds (30) one ``RecourseApp`` replica's process SIGKILLed. Counted: requests,
   errors (any non-200 or transport error; target 0: the clients retry nothing), requests the ingress
   sent again after their replica died, seconds until Ray started a replacement process and until the
   replacement answered (its ``/readyz`` says it started after the kill), latency before and after.

Writes ``benchmarks/results/ray_serve.{json,md}``. The helpers (the replica processes of a
``serve.py --ray-serve`` process, the load) serve ``tests/test_ray_serve.py`` too.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.server_harness import ROOT, free_port, start_on_free_port, start_server, stop_server  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
RESENT = "sending it again"  # serving/ray_serve.py's line for a request sent again after its replica died


# ------------------------------------------------------------------------------ processes (Linux /proc)

def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, theirs, ...), from /proc."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def replica_pids(server_pid: int, deployment: str = "RecourseApp") -> list[int]:
    """The processes of ``deployment``'s replicas under a ``serve.py --ray-serve --address local`` process
    (Ray names a replica's process ``ray::ServeReplica:recourse:DEPLOYMENT``)."""
    return sorted(p for p in descendants(server_pid) if f"ServeReplica:recourse:{deployment}" in cmdline(p))


def stop_ray_server(proc: Any, timeout: float = 120.0) -> int | None:
    """SIGTERM a ``serve.py --ray-serve`` process (it deletes the application and stops its Ray), wait, then
    SIGKILL it and whatever of its processes is left; its exit status (None if it had to be killed)."""
    family = descendants(proc.pid)
    proc.terminate()
    try:
        rc = proc.wait(timeout=timeout)
    except Exception:  # subprocess.TimeoutExpired
        proc.kill()
        proc.wait()
        rc = None
    for pid in family:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return rc


def kill_replica(server_pid: int) -> tuple[int, list[int]]:
    """SIGKILL one app replica's process; (its pid, its child processes at the time)."""
    pid = replica_pids(server_pid)[0]
    kids = descendants(pid)
    os.kill(pid, signal.SIGKILL)
    return pid, kids


# ---------------------------------------------------------------------------------------------- records

def generator_records(run_dir: Path, n: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(``n`` rejected records the run's generator answers itself, drawn with repetition; every distinct
    rejected record of the run's rows), as raw records."""
    from serving.tabular import TabularService

    svc = TabularService(run_dir, fallback_budget_s=0.0)
    try:
        rows = np.asarray(svc.run.domain_rows(), float)
        rows = np.unique(rows[~svc.world.accepts(rows)], axis=0)
        answered = np.array([a.method == svc.model_name for a in svc.recommend(rows)])
        picked = rows[answered][np.random.default_rng(seed).integers(0, int(answered.sum()), n)]
        return [svc.codec.decode(x) for x in picked], [svc.codec.decode(x) for x in rows]
    finally:
        svc.close()


def strip(answer: dict) -> dict:
    return {k: v for k, v in answer.items() if k != "latency_ms"}


def answers(base: str, records: list[dict], threads: int = 4) -> list[dict]:
    """POST /recommend for each record (``threads`` clients), the answers in record order."""
    local = threading.local()

    def one(rec: dict) -> dict:
        if not hasattr(local, "c"):
            local.c = httpx.Client(base_url=base, timeout=60.0)
        r = local.c.post("/recommend", json=rec)
        return r.json() if r.status_code == 200 else {"http_status": r.status_code, "body": r.text[:300]}

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, records))


def compare(single: list[dict], other: list[dict]) -> dict[str, Any]:
    """Identical answers (minus ``latency_ms``) and the first differing ones."""
    diff = [i for i, (a, b) in enumerate(zip(single, other, strict=True)) if strip(a) != strip(b)]
    return {"records": len(single), "identical": len(single) - len(diff),
            "differing": [{"i": i, "single": strip(single[i]), "ray": strip(other[i])} for i in diff[:3]]}


# ------------------------------------------------------------------------------------------------ load

def load(base: str, records: list[dict], seconds: float, threads: int = 4,
         at: float | None = None, action: Any = None) -> tuple[list[tuple[float, float, str]], float | None]:
    """``threads`` clients POSTing /recommend (records in turn) for ``seconds``; ``action()`` once at ``at``
    seconds. Returns [(start s, ms, '' or the error)] and when the action ran (None: not)."""
    out: list[tuple[float, float, str]] = []
    lock = threading.Lock()
    t0 = time.monotonic()
    acted: list[float] = []

    def client(k: int) -> None:
        with httpx.Client(base_url=base, timeout=60.0) as c:
            i = k
            while (t := time.monotonic() - t0) < seconds:
                try:
                    r = c.post("/recommend", json=records[i % len(records)])
                    err = "" if r.status_code == 200 else f"HTTP {r.status_code}: {r.text[:120]}"
                except httpx.HTTPError as e:
                    err = f"{type(e).__name__}: {e}"
                with lock:
                    out.append((t, (time.monotonic() - t0 - t) * 1e3, err))
                i += threads

    workers = [threading.Thread(target=client, args=(k,)) for k in range(threads)]
    for w in workers:
        w.start()
    if action is not None and at is not None:
        time.sleep(max(0.0, at - (time.monotonic() - t0)))
        acted.append(time.monotonic() - t0)
        action()
    for w in workers:
        w.join()
    return sorted(out), (acted[0] if acted else None)


def replacement_ready(base: str, since: float, timeout: float = 300.0) -> float | None:
    """Seconds from ``since`` (time.monotonic()) until a replica that started after it answers ``/readyz``
    (its ``seconds`` since start shorter than the time since ``since``): the replacement takes traffic."""
    with httpx.Client(base_url=base, timeout=10.0) as c:
        while (waited := time.monotonic() - since) < timeout:
            try:
                r = c.get("/readyz")
                if r.status_code == 200 and r.json().get("seconds", 1e9) < time.monotonic() - since:
                    return round(waited, 2)
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    return None


def summarize(rows: list[tuple[float, float, str]], lo: float = 0.0, hi: float = float("inf")) -> dict[str, Any]:
    sel = [r for r in rows if lo <= r[0] < hi]
    ms = [r[1] for r in sel if not r[2]]
    span = min(hi, max((r[0] for r in sel), default=lo)) - lo
    return {"requests": len(sel), "errors": sum(1 for r in sel if r[2]),
            "per_s": round(len(sel) / span, 1) if span > 0 else None,
            "p50_ms": round(float(np.percentile(ms, 50)), 2) if ms else None,
            "p99_ms": round(float(np.percentile(ms, 99)), 2) if ms else None,
            "max_ms": round(max(ms), 2) if ms else None}


# ------------------------------------------------------------------------------------------------ main

def run(run_dir: Path, n_records: int, threads: int, baseline_s: float, load_s: float, kill_at: float) -> dict:
    from benchmarks.warmup import warming_up

    out: dict[str, Any] = {"run": str(run_dir), "cpu_count": os.cpu_count(), "threads": threads,
                           "loadavg_1min_before": os.getloadavg()[0]}
    with warming_up("the run's generator on its rejected records (choosing the records)"):
        fixed, every = generator_records(run_dir, n_records)
    out["records"] = {"compared": len(fixed), "load": len(every)}
    with tempfile.TemporaryDirectory(prefix="ray-serve-bench-") as tmp:
        tmp_path = Path(tmp)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        t = time.monotonic()
        proc = start_server(run_dir, None, port, 10_000, tmp_path / "single.log", timeout=600,
                            extra=["--jobs-dir", str(tmp_path / "jobs1")])
        out["single_ready_s"] = round(time.monotonic() - t, 1)
        try:
            answers(base, every[:20])  # its fallback child's first start, not timed
            single = answers(base, fixed, threads)
            rows, _ = load(base, every, baseline_s, threads)
            out["single_load"] = summarize(rows)
        finally:
            stop_server(proc)
        log = tmp_path / "ray.log"
        t = time.monotonic()
        proc, port = start_on_free_port(run_dir, None, 10_000, log, timeout=900,
                                        extra=["--ray-serve", "--replicas", "2", "--address", "local",
                                               "--jobs-dir", str(tmp_path / "jobs2")])
        base = f"http://127.0.0.1:{port}"
        out["ray_ready_s"] = round(time.monotonic() - t, 1)
        try:
            answers(base, every[:20])
            out["identity"] = compare(single, answers(base, fixed, threads))
            before = replica_pids(proc.pid)
            killed: dict[str, Any] = {}

            def kill() -> None:
                killed["pid"], killed["children"] = kill_replica(proc.pid)
                killed["at"] = time.monotonic()
                threading.Thread(target=lambda: killed.update(ready_after_s=replacement_ready(base, killed["at"])),
                                 daemon=True).start()
                threading.Thread(target=_watch_process, args=(proc.pid, before, killed), daemon=True).start()

            rows, kill_s = load(base, every, load_s, threads, kill_at, kill)
            deadline = time.monotonic() + 300
            while "ready_after_s" not in killed and time.monotonic() < deadline:
                time.sleep(0.5)
            out["ray_load"] = {"all": summarize(rows), "before_kill": summarize(rows, 0, kill_s or load_s),
                               "10s_after_kill": summarize(rows, kill_s or load_s, (kill_s or load_s) + 10),
                               "after_kill": summarize(rows, kill_s or load_s),
                               "errors": sorted({r[2] for r in rows if r[2]})[:5]}
            out["kill"] = {"at_s": round(kill_s, 1) if kill_s else None, "replicas_before": len(before),
                           "new_process_after_s": killed.get("new_process_after_s"),
                           "replacement_answering_after_s": killed.get("ready_after_s"),
                           "killed_children_left": [p for p in killed.get("children", []) if alive(p)],
                           "replicas_after": len(replica_pids(proc.pid))}
        finally:
            out["ray_exit_status"] = stop_ray_server(proc)
        out["ray_resent_requests"] = log.read_text(errors="replace").count(RESENT)
    out["loadavg_1min_after"] = os.getloadavg()[0]
    return out


def _watch_process(server_pid: int, before: list[int], killed: dict[str, Any]) -> None:
    """Record when a replica process that was not there before the kill appears."""
    while time.monotonic() - killed["at"] < 300:
        if set(replica_pids(server_pid)) - set(before):
            killed["new_process_after_s"] = round(time.monotonic() - killed["at"], 2)
            return
        time.sleep(0.2)


def markdown(r: dict[str, Any], command: str) -> str:
    L = r["ray_load"]

    def row(name: str, s: dict) -> str:
        return f"| {name} | {s['requests']} | {s['errors']} | {s['per_s']} | {s['p50_ms']} | {s['p99_ms']} | {s['max_ms']} |"

    k, ident = r["kill"], r["identity"]
    return "\n".join([
        f"### Ray Serve, 2 replicas, one killed under load ({Path(r['run']).name}, {r['cpu_count']} cores, "
        f"{r['threads']} client threads, load {r['loadavg_1min_before']:.1f} -> {r['loadavg_1min_after']:.1f})", "",
        f"`{command}`", "",
        "| phase | requests | errors | requests/s | p50 ms | p99 ms | max ms |", "|---|---:|---:|---:|---:|---:|---:|",
        row("single process (baseline)", r["single_load"]), row("Ray Serve: before the kill", L["before_kill"]),
        row("Ray Serve: 10 s after the kill", L["10s_after_kill"]), row("Ray Serve: after the kill", L["after_kill"]),
        row("Ray Serve: all", L["all"]), "",
        f"- answers identical to the single process: **{ident['identical']} of {ident['records']}** records "
        "(minus `latency_ms`)",
        f"- killed at {k['at_s']} s: a replacement process after {k['new_process_after_s']} s, answering after "
        f"{k['replacement_answering_after_s']} s; requests the ingress sent again: {r['ray_resent_requests']}; "
        f"errors seen by the clients: **{L['all']['errors']}**",
        f"- ready: single process {r['single_ready_s']} s, Ray Serve (Ray started, 2 replicas and the jobs "
        f"replica built) {r['ray_ready_s']} s", ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", nargs="?", default="runs/german_forest_small", help="a trained tabular run")
    p.add_argument("--records", type=int, default=1000, help="records whose answers are compared")
    p.add_argument("--threads", type=int, default=4, help="client threads")
    p.add_argument("--baseline-s", type=float, default=20.0, help="seconds of load on the single process")
    p.add_argument("--load-s", type=float, default=60.0, help="seconds of load on Ray Serve")
    p.add_argument("--kill-at", type=float, default=30.0, help="second of the load at which a replica is killed")
    p.add_argument("--results", default=str(RESULTS / "ray_serve"), help="output prefix (.json and .md)")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").exists():
        print(f"error: {run_dir} is not a trained run (python train.py configs/german_forest.yaml)", file=sys.stderr)
        return 2
    r = run(run_dir, args.records, args.threads, args.baseline_s, args.load_s, args.kill_at)
    command = "python benchmarks/ray_serve_load.py " + " ".join(argv if argv is not None else sys.argv[1:])
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results + ".json").write_text(json.dumps(r, indent=2))
    Path(args.results + ".md").write_text(markdown(r, command.strip()))
    print(markdown(r, command.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
