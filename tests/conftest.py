"""Shared test fixtures."""

import os

import pytest
import torch

# `make test` runs the suite on pytest-xdist workers (one per core): each worker takes its share of the
# cores, so two workers' torch thread pools do not fight over the same two cores (and the commands a test
# starts inherit the same share through OMP_NUM_THREADS).
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    _share = max(1, (os.cpu_count() or 1) // _workers)
    torch.set_num_threads(_share)
    os.environ["OMP_NUM_THREADS"] = str(_share)

# The end-to-end files take most of the suite's time (stock ns-* start-ups, browsers, distillation). They are
# handed out first (`make test` passes --no-loadscope-reorder), so no worker is left with one at the end while
# the other idles; the order of the tests inside a file is unchanged.
LONGEST_FILES_FIRST = (
    "test_methods_cli.py",
    "test_viewer_browser.py",
    "test_bad_input.py",
    "test_distill.py",
    "test_export.py",
    "test_web_viewer.py",
    "test_colour.py",
)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        name = item.path.name
        return LONGEST_FILES_FIRST.index(name) if name in LONGEST_FILES_FIRST else len(LONGEST_FILES_FIRST)

    items.sort(key=rank)  # stable: the rest keep their collection order


@pytest.fixture(scope="module")
def one_thread():
    """Small models train several times faster on one thread on a shared 2-core CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
