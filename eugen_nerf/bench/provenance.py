"""Where a benchmark figure comes from: the machine, the software versions, the code's commit and the scene.

Every suite result records :func:`provenance` so that a figure can be traced to what produced it and two
results can be told apart when their machine, code or data differ.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from importlib import metadata
from pathlib import Path

from eugen_nerf.bench.index import cpu_model, load

PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def version(package: str) -> str | None:
    """The installed version of ``package`` (``None`` when it is not installed)."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def code_commit(root: Path = PACKAGE_ROOT) -> str:
    """The git commit the package runs from, with ``+dirty`` when tracked files differ from it; the package
    version where the package is not a git checkout (an installed wheel)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "eugen_nerf"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"eugen-nerf {version('eugen-nerf') or 'unknown'} (not a git checkout)"
    return head + ("+dirty" if dirty else "")


def content_hash(folder: Path) -> str:
    """SHA-256 over every file below ``folder`` (relative path and bytes, in sorted order): equal for the
    same data wherever it lies, different as soon as one image, pose or setting changes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def provenance(*scenes: Path) -> dict[str, object]:
    """The machine (CPU model, cores, torch threads, GPU, load average), the torch and nerfstudio versions,
    the code's commit and the content hash of each scene folder given."""
    import torch

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "load_average": round(load(), 2),
        "torch": torch.__version__,
        "nerfstudio": version("nerfstudio"),
        "commit": code_commit(),
        "scenes": {str(scene): content_hash(Path(scene)) for scene in scenes},
    }
