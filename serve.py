"""Serve a trained generator of a run directory over HTTP, or recommend for a file of agents.

A tabular run (a real data set: its config.yaml has a ``tabular:`` section) takes raw records:

    python serve.py runs/adult_forest [--model NAME] [--fallback-budget-ms 50] [--max-diverse 5]
    python serve.py runs/adult_forest --batch-in people.csv --batch-out answers.csv [--n-diverse 0]
    python serve.py runs/adult_forest --batch-in people.parquet --batch-out answers.parquet --ray auto
    python serve.py runs/remote_german_mlp --model proposer --model-latency-ms 20   # a remote model, simulated

Big batches over HTTP: POST /recommend/batch answers up to --max-batch records, 250 at a time off
the event loop; POST /jobs takes the same body as a background job (GET /jobs/{id} for progress and
pages of answers). SIGTERM / SIGINT stop the server and its fallback process within seconds.

Its answers are the generator's, verified against the model and the schema, with GeCo then MACE
as the fallback chain within the budget ("unknown" past it; the answer is cached when it lands).
A sequential run (configs/sequential_adult.yaml: its config names a ``world``) answers with
ordered actions, the policy first and the BRKGA sequencer as the fallback.

    python serve.py runs/NAME [--model NAME] [--filter all] [--seed 0] [--host 127.0.0.1] [--port 8000]
                    [--fallback-budget-ms 50] [--max-batch 10000]
    python serve.py runs/NAME --batch-in agents.csv --batch-out out.parquet
    python serve.py runs/NAME --batch-in big.parquet --batch-out out.parquet --ray auto [--chunk-size 50000]

Every answer is verified against the run's world; an invalid generated answer is replaced by the
exact set-cover solver within the fallback budget (status "unknown" past it). API docs at /docs.
"""

import argparse
import logging
import sys
from pathlib import Path

# Nothing heavy at the top: the server listens (/livez) before torch, numba or the run are loaded.
from serving.preflight import PreflightError, check_files

SERVER_BUDGET_MS = 50.0
GRACE_S = 2  # seconds a shutdown waits for open requests
WORKER_WARMUP_S = 900.0  # the longest wait for the batch worker's warm-up before the server turns ready


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", help="a trained run directory (runs/NAME)")
    p.add_argument("--model", default=None, help="model name in the run (default: the config's first generator; "
                   "tabular: none serves the fallback chain alone)")
    p.add_argument("--filter", default="all", help="the CFE-frequency filter the model was trained on")
    p.add_argument("--seed", type=int, default=0, help="the training seed of the model")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--fallback-budget-ms", type=float, default=None,
                   help=f"time the exact fallback may take per request (default {SERVER_BUDGET_MS:g} ms when "
                        "serving, no limit with --batch-in; 'inf' for no limit)")
    p.add_argument("--max-batch", type=int, default=10_000, help="largest batch per request (422 above)")
    p.add_argument("--model-latency-ms", type=float, default=0.0,
                   help="tabular: the model behind a round trip of this many ms a call (a remote scoring API, "
                        "simulated): predict_proba only, GeCo the only fallback (default 0: in process)")
    p.add_argument("--batch-in", default=None, help="offline: CSV/Parquet of agents (f0..f{n-1} or list column x; "
                                                    "optional group)")
    p.add_argument("--batch-out", default=None, help="offline: where to write the answers (.csv or .parquet)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="offline batch files only (--batch-in/--batch-out, Parquet in and out; capability-world and "
                        "tabular runs, not sequential ones): one Ray task per chunk of the input's row groups, each "
                        "worker loading the run once, resumable from --work-dir, on the cluster at ADDRESS ('auto', "
                        "'ray://host:port', or 'local' to start one here). The HTTP server never uses Ray. "
                        "Needs the ray extra: pip install -e '.[ray]'")
    p.add_argument("--ray-workers", type=int, default=2, help="CPUs of a Ray instance started with --ray local")
    p.add_argument("--chunk-size", type=int, default=50_000, help="agents (records) per chunk with --ray")
    p.add_argument("--work-dir", default=None,
                   help="finished chunks with --ray (a rerun resumes from them; default: BATCH_OUT.chunks)")
    p.add_argument("--max-diverse", type=int, default=5, help="tabular: most alternatives a request may ask for")
    p.add_argument("--n-diverse", type=int, default=0, help="tabular, offline: alternatives per record")
    p.add_argument("--beam-width", type=int, default=None,
                   help="sequential runs: answer with the policy's verified beam search of this width (1: raw rollout)")
    p.add_argument("--jobs-dir", default=None,
                   help="tabular and sequential runs: where batch jobs (POST /jobs) and their finished chunks are kept, "
                        "so that a restarted server finishes them (default: RUN_DIR/jobs; 'none': in memory only)")
    p.add_argument("--api-keys", default=None, metavar="FILE",
                   help="require an API key (Authorization: Bearer KEY): a file of SHA-256 hashes, one NAME:HEX per "
                        "line (python -m serving.keys hash KEY); or set RECOURSE_API_KEYS=key1,key2. Off by default: "
                        "turn it on before binding --host to anything but loopback")
    p.add_argument("--rate-limit", type=float, default=50.0,
                   help="with API keys: requests a second per key (bursts of twice that; 0: no limit)")
    p.add_argument("--ray-serve", action="store_true",
                   help="serve on Ray Serve (serving/ray_serve.py): replicas that each build this app, behind Ray Serve's "
                        "HTTP proxy on --host/--port; needs the ray extra: pip install -e '.[ray]'")
    p.add_argument("--address", default="local",
                   help="with --ray-serve: the Ray cluster ('local': start one here; 'auto': the running one; HOST:6379)")
    p.add_argument("--replicas", type=int, default=None, help="with --ray-serve: app replicas (default 2)")
    p.add_argument("--autoscale", default=None, metavar="MIN:MAX",
                   help="with --ray-serve: replicas autoscaled between MIN and MAX on the ongoing requests per replica")
    p.add_argument("--target-ongoing", type=float, default=2.0,
                   help="with --autoscale: ongoing requests per replica the autoscaler aims at")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = p.parse_args(argv)
    if not args.model_latency_ms >= 0:
        p.error(f"--model-latency-ms: must be >= 0, got {args.model_latency_ms}")
    if (args.batch_in is None) != (args.batch_out is None):
        p.error("--batch-in and --batch-out go together")
    if args.ray and not args.batch_in:
        p.error("--ray is for offline batches (--batch-in/--batch-out)")
    if args.ray_serve and args.batch_in:
        p.error("--ray-serve serves HTTP; an offline batch (--batch-in) runs on Ray with --ray ADDRESS")
    if (args.replicas is not None or args.autoscale) and not args.ray_serve:
        p.error("--replicas and --autoscale go with --ray-serve")
    if args.replicas is not None and args.autoscale:
        p.error("--replicas and --autoscale: give one of them")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    budget_ms = args.fallback_budget_ms
    if budget_ms is None:
        budget_ms = float("inf") if args.batch_in else SERVER_BUDGET_MS
    budget_s = budget_ms / 1e3
    try:
        family = check_files(args.run_dir)  # yaml and the file system only: a plainly unservable run stops here
        if not args.batch_in:
            from serving.keys import KeyStore

            args.keys = KeyStore.configured(args.api_keys)
    except (PreflightError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.model_latency_ms and family != "tabular":
        print(f"error: --model-latency-ms: only a tabular run's model can be served behind a round trip "
              f"(this run is {family})", file=sys.stderr)
        return 2
    if args.batch_in:
        return _offline(args, family, budget_s)
    if args.keys is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        logging.getLogger("recourse_gym.serve").warning(
            "listening on %s without API keys: anyone who reaches it can use it (see --api-keys)", args.host)
    from serving.startup import StartingApp

    build = {"tabular": _tabular_builder, "sequential": _sequential_builder, "capability": _capability_builder}[family]
    if args.ray_serve:
        return _ray_serve(args, build, family, budget_s)
    return _run_server(StartingApp(build(args, budget_s)), args)


def _ray_serve(args: argparse.Namespace, build, family: str, budget_s: float) -> int:
    """--ray-serve: each Ray Serve replica runs the builder below (sent to it by value); the jobs live in one."""
    from envs.optional import MissingExtraError
    from serving.ray_serve import RayServeError, parse_autoscale, serve_on_ray

    replica_args = argparse.Namespace(**{**vars(args), "jobs_dir": "none"})  # no replica but the jobs one owns them
    try:
        return serve_on_ray(build(replica_args, budget_s), jobs_build=None if family == "capability" else build(args, budget_s),
                            address=args.address, host=args.host, port=args.port, replicas=args.replicas or 2,
                            autoscale=parse_autoscale(args.autoscale) if args.autoscale else None,
                            target_ongoing=args.target_ongoing, log_level=args.log_level)
    except (MissingExtraError, RayServeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _offline(args: argparse.Namespace, family: str, budget_s: float) -> int:
    """--batch-in/--batch-out: answer a file (capability and tabular runs), in process or on Ray."""
    from envs.optional import MissingExtraError
    from serving.service import InputError, ServiceError

    if family == "sequential":
        print("error: --batch-in: offline files are for capability-world and tabular runs; POST "
              "/recommend/batch serves a sequential run", file=sys.stderr)
        return 2
    try:
        if family == "tabular":
            from serving.batch import recommend_raw_file, recommend_raw_parquet
            from serving.tabular import TabularService

            svc = TabularService(args.run_dir, args.model, budget_s, args.max_batch, max(args.max_diverse, args.n_diverse),
                                 model_latency_s=args.model_latency_ms / 1e3)
            if args.ray:
                counts = recommend_raw_parquet(svc, args.batch_in, args.batch_out,
                                               args.work_dir or f"{args.batch_out}.chunks", compute=_ray_compute(args),
                                               n_diverse=args.n_diverse)
            else:
                counts = recommend_raw_file(svc, args.batch_in, args.batch_out, args.n_diverse)
                print(f"rates: {svc.stats()['rates']}")
        else:
            from serving.batch import recommend_file, recommend_parquet
            from serving.service import RecommendationService

            svc = RecommendationService(args.run_dir, args.model, args.filter, args.seed, budget_s, args.max_batch)
            if args.ray:
                counts = recommend_parquet(svc, args.batch_in, args.batch_out,
                                           args.work_dir or f"{args.batch_out}.chunks", compute=_ray_compute(args))
            else:
                counts = recommend_file(svc, args.batch_in, args.batch_out)
    except (ServiceError, InputError, FileNotFoundError, MissingExtraError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {sum(counts.values())} answers to {args.batch_out}: {counts}")
    return 0


def _capability_builder(args: argparse.Namespace, budget_s: float):
    """A capability-world run's app, built behind the listening server."""
    def build(set_phase):
        set_phase("loading the run")
        from serving.app import create_app

        return create_app(args.run_dir, args.model, args.filter, args.seed, budget_s, args.max_batch, keys=args.keys,
                          rate_limit=args.rate_limit)

    return build


def _sequential_builder(args: argparse.Namespace, budget_s: float):
    """A sequential run's app (ordered actions), built behind the listening server."""
    def build(set_phase):
        set_phase("loading the run")
        from serving.sequential import create_sequential_app

        return create_sequential_app(args.run_dir, args.model, budget_s, args.max_batch, beam_width=args.beam_width,
                                     jobs_dir=_jobs_dir(args), keys=args.keys, rate_limit=args.rate_limit)

    return build


def _ray_compute(args: argparse.Namespace):
    """The Ray cluster of ``--ray`` (``local``: start one here with ``--ray-workers`` CPUs)."""
    from data_gen.compute import ComputeConfig

    return ComputeConfig(backend="ray", address=None if args.ray == "local" else args.ray,
                         n_workers=args.ray_workers, chunk_size=args.chunk_size)


def _run_server(app: object, args: argparse.Namespace) -> int:
    """uvicorn until SIGTERM / SIGINT; requests still open after GRACE_S are dropped, then the app's
    shutdown stops its jobs and fallback process. ``app`` is wrapped in a :class:`StartingApp` (ready at
    once) unless it is one: the server answers /livez and /readyz from its first second."""
    import uvicorn

    from serving.startup import StartingApp

    starting = app if isinstance(app, StartingApp) else StartingApp(lambda set_phase: app)
    server = uvicorn.Server(uvicorn.Config(starting, host=args.host, port=args.port, log_level=args.log_level,
                                           timeout_graceful_shutdown=GRACE_S))
    starting.on_failure = lambda: setattr(server, "should_exit", True)  # a replica that cannot start exits
    server.run()
    if starting.error:
        print(f"error: {starting.error}", file=sys.stderr)
        return 2
    return 0


def _jobs_dir(args: argparse.Namespace) -> str | None:
    """Where the batch jobs live: --jobs-dir, RUN_DIR/jobs by default, None for 'none' (memory only)."""
    if args.jobs_dir is None:
        return str(Path(args.run_dir) / "jobs")
    return None if args.jobs_dir.lower() == "none" else args.jobs_dir


def _tabular_builder(args: argparse.Namespace, budget_s: float):
    """Build the tabular app behind a listening server: the service (its probe answer compiles the search
    kernels the run uses, once per machine: numba's on-disk cache; its fallback process), then a warm-up
    on the run's own records (a batch, one record, alternatives), so the first request is not the one
    that compiles."""
    def build(set_phase):
        set_phase("loading the run")
        from serving.app import shutdown
        from serving.batch_worker import BatchWorker
        from serving.startup import warm_up_tabular
        from serving.tabular import TabularService, load_run
        from serving.tabular_app import create_tabular_app

        # Batches and jobs in a process of their own, so a single request never waits for a batch's GIL. It
        # starts first: it imports, loads and warms up beside this process's own (on 2 cores, 18 -> 13-16 s
        # to ready for a tiny run), and the server is ready when both are.
        worker = BatchWorker(args.run_dir, args.model, budget_s, args.max_batch, args.max_diverse,
                             model_latency_s=args.model_latency_ms / 1e3)
        worker_ready = worker.start()
        try:
            run = load_run(args.run_dir)  # the fingerprints checked
            set_phase("compiling the run's search kernels (first start on this machine only; cached after)")
            svc = TabularService(args.run_dir, args.model, budget_s, args.max_batch, args.max_diverse, run=run,
                                 fallback_process=True, model_latency_s=args.model_latency_ms / 1e3)
        except BaseException:
            worker.close()  # a run that does not load leaves no child behind
            raise
        svc.batch_worker = worker
        set_phase("warming up the generator on the run's records")
        warm_up_tabular(svc)
        set_phase("warming up the batch worker")
        try:
            worker_ready.result(timeout=WORKER_WARMUP_S)
        except Exception as err:  # noqa: BLE001 (a worker that cannot start: chunks are answered here)
            logging.getLogger("recourse_gym.serve").warning("batch worker not ready (%s); batches answered in "
                                                            "the server's process until it is", err)
        app = create_tabular_app(args.run_dir, service=svc, jobs_dir=_jobs_dir(args), keys=args.keys,
                                 rate_limit=args.rate_limit)
        # The app closes only a service it made: this one (its fallback process) and the worker are ours.
        shutdown(app, svc.batch_worker, svc)
        return app

    return build


if __name__ == "__main__":
    sys.exit(main())
