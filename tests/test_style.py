"""The code passes the project's ruff rules and is in ruff's format (``pyproject.toml``), so a change that
breaks either fails CI rather than landing; ruff is pinned in the ``dev`` extra, so a new release cannot move
the goalposts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_code_passes_ruff(command) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
