"""Serving a trained generator: the HTTP service and the offline batch mode.

- :mod:`serving.service` -- :class:`RecommendationService`: one model of a run directory, its
  world, counters and provenance;
- :mod:`serving.fallback` -- verification against the world and the exact fallback solver;
- :mod:`serving.schemas` -- the request/response models, i.e. the API's OpenAPI contract;
- :mod:`serving.app` -- the FastAPI app (needs the ``serve`` extra);
- :mod:`serving.batch` -- the same answers for a CSV/Parquet file of agents.

The top layer of the library (``envs`` <- ``solvers`` <- ``data_gen`` <- ``learners`` <-
``serving`` <- the scripts): it may import every package below it, and none of them imports it.
"""
