"""Suite-wide settings: in CI (RECOURSE_STRICT_SKIPS=1) a skipped test fails the run.

A skip in CI proves nothing: CI installs every extra, so a test that skips there has lost its
dependency or its data. Tests for an optional path a user may lack carry ``@pytest.mark.optional``
and may skip anywhere.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "optional: an optional path that may skip even in CI")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("RECOURSE_STRICT_SKIPS") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = [r for r in (reporter.stats.get("skipped", []) if reporter else [])
               if "optional" not in getattr(r, "keywords", {})]
    if skipped:
        lines = [f"RECOURSE_STRICT_SKIPS: {len(skipped)} test(s) skipped; in CI a skip is a failure:"]
        lines += [f"  {r.nodeid}: {r.longrepr[-1] if isinstance(r.longrepr, tuple) else r.longrepr}"
                  for r in skipped[:20]]
        print("\n" + "\n".join(lines))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="module")
def ray_cluster():
    """A local 2-CPU Ray instance for one test module: its workers (and what they load) are reused."""
    pytest.importorskip("ray")
    from data_gen.compute import ComputeConfig, ray_init

    # ray_init's local instance runs its workers at nice 0, not Ray's 15: beside the other xdist worker's
    # CPU-bound tests they starved (a 120-agent batch on Ray: 24 s alone, 125 s in the suite)
    ray = ray_init(ComputeConfig(backend="ray", n_workers=2))
    yield ray
    ray.shutdown()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules that hold a ``slow`` test run first: the suite runs on two pytest-xdist workers, a module
    whole on one, in collection order (pyproject.toml's addopts: ``--dist loadscope
    --no-loadscope-reorder``), and the long modules started last would leave one worker idle while the
    other finishes them (xdist's own order, the modules with the most tests first, did that)."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)  # stable: the order within stays
