"""The package built as a wheel and installed on its own runs every command from a folder outside the checkout:
what ``eugen-bench`` and the other commands need (suites, protocols) ships in the wheel."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def console_scripts() -> dict[str, str]:
    """``[project.scripts]`` of pyproject.toml: command -> ``module:function``."""
    section = (ROOT / "pyproject.toml").read_text().split("[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+) = "([\w.]+:\w+)"$', section, re.MULTILINE))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # every command imports torch and nerfstudio in a fresh process
def test_the_installed_wheel_runs_every_command_from_outside_the_checkout(tmp_path):
    source = tmp_path / "source"  # a copy: building in the checkout would leave build/ behind
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "eugen_nerf", source / "eugen_nerf", ignore=shutil.ignore_patterns("__pycache__"))
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, source], check=True)
    (wheel,) = wheels.glob("eugen_nerf-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for data in ("cpu.yaml", "cuda.yaml", "tables.yaml"):
        assert f"eugen_nerf/bench/protocols/{data}" in names
    subprocess.run([*pip, "install", "--no-deps", "--target", site, wheel], check=True)

    elsewhere = tmp_path / "elsewhere"  # no README, scenes, scripts or configs here
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONWARNINGS": "ignore"}

    def run(script: str, *args: str) -> subprocess.CompletedProcess:
        module, function = console_scripts()[script].split(":")
        code = (
            f"import sys, eugen_nerf; assert eugen_nerf.__file__.startswith({str(site)!r}), eugen_nerf.__file__; "
            f"sys.argv = [{script!r}, *{list(args)!r}]; from {module} import {function}; {function}()"
        )
        return subprocess.run(
            [sys.executable, "-c", code],
            check=False,
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    listed = run("eugen-bench", "--list")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert listed.stdout.split()[0] == "layers" and "siren" in listed.stdout
    for script in console_scripts():
        helped = run(script, "--help")
        assert helped.returncode == 0, (script, helped.stderr[-2000:])
        assert "usage" in helped.stdout.lower(), (script, helped.stdout[:500])
    missing = run("eugen-bench", "inference")  # the scenes are data: a missing one is named with its command
    assert missing.returncode == 2 and "eugen-scenes blender shiny --output scenes/shiny128" in missing.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == []
