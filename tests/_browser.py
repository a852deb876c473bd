"""The browser fixture of the tests: headless Chromium (``eugen_nerf.bench.browser``) must be installed; its
absence is a failure naming the package to install, not a skip."""

from __future__ import annotations

import pytest

from eugen_nerf.bench.browser import Browser, chromium_missing, stop_process_group

__all__ = ["Browser", "chromium", "stop_process_group"]


@pytest.fixture(scope="module")
def chromium() -> None:
    """For browser tests: Chromium missing is a failure naming the setup command, not a skip."""
    missing = chromium_missing()
    if missing:
        pytest.fail(missing, pytrace=False)
