"""Train the small Zip-NeRF pair the hash-grid export is measured on: dense-zipnerf and eugen-zipnerf at the
CPU preset (eugen-bench's small_zipnerf: a 6-level grid to 512 with 2^16 entries, proposal grids to 128 and
256) on scenes/bunny64, the same seed and steps. A rerun with a finished run reuses it.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/export/train_zipnerf.py [STEPS]
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

from eugen_nerf.bench.suites.methods import small_zipnerf
from eugen_nerf.bench.training import train_in_process
from eugen_nerf.methods.zipnerf import dense_zipnerf, eugen_zipnerf

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "outputs" / "export-zipnerf"
SCENE = REPO / "scenes" / "bunny64"


def main(steps: int) -> None:
    for spec in (dense_zipnerf, eugen_zipnerf):
        config = copy.deepcopy(spec.config)
        config.machine.device_type = "cpu"
        config.mixed_precision = False
        small_zipnerf(config)
        config.pipeline.model.implementation = "torch"  # the exporter reads the torch grid's table
        path, seconds = train_in_process(
            config, SCENE, steps, ROOT, timestamp=spec.config.method_name, reuse=True
        )
        print(f"{spec.config.method_name}: {path} ({seconds:.3f} s/step)", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 600)
