#!/usr/bin/env bash
# Packs what the training suites (eugen_nerf.bench.suites.methods: `eugen-bench nerf`, `fields`) need on a
# lent GPU machine that has Python 3.12 with PyTorch, CUDA, numpy and matplotlib but no nerfstudio and no
# package registry. Run here, after scripts/setup.sh; writes .gpu-bundle/ (git-ignored, about 11 MB):
#   site.tgz      nerfstudio and the packages it imports that such a machine lacks, unpacked from their
#                 Python 3.12 wheels, at this checkout's .venv versions (viewer assets and test data dropped);
#   alex.pth.gz   the LPIPS weights of `eugen-eval setup-lpips`;
#   run.sh        the command to run there (scripts/gpu_suite.sh).
# rawpy and fpsample are stand-ins that raise on use: only RAW-photo processing and splatfacto use them.
# Then, through the device tool, with `.gpu-bundle` carried:
#   bash .gpu-bundle/run.sh 480 --scene scenes/branches128 --families nerf --plateau --steps 8000 ...
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[ -x "$PY" ] || { echo "[gpu-bundle] run bash scripts/setup.sh first" >&2; exit 2; }
OUTDIR=.gpu-bundle
WHEELS=$OUTDIR/wheels
PACKAGES="nerfstudio tyro typeguard docstring-parser viser websockets msgspec nerfacc gsplat pyquaternion splines
  pytorch-msssim torch-fidelity tensorly appdirs defusedxml dill pysocks pathos ppft pox multiprocess"
rm -rf "$OUTDIR" && mkdir -p "$WHEELS" "$OUTDIR/site"
platforms=()
for n in 5 17 24 27 28 31 34 35; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
for name in $PACKAGES; do
  version=$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))")
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 "${platforms[@]}" -d "$WHEELS" \
    "$name==$version" 2>&1 | grep -v "^WARNING" || true
  ls "$WHEELS" | grep -qi "^${name//-/_}-$version" || ls "$WHEELS" | grep -qi "^$name-$version" \
    || { echo "[gpu-bundle] no Python 3.12 wheel of $name==$version" >&2; exit 1; }
done
for wheel in "$WHEELS"/*.whl; do unzip -q -o "$wheel" -d "$OUTDIR/site"; done
rm -rf "$WHEELS"
(cd "$OUTDIR/site" && rm -rf viser/_icons viser/client gsplat/cuda/csrc tensorly/datasets/data tests)
for stub in rawpy fpsample; do
  mkdir -p "$OUTDIR/site/$stub"
  printf '"""Stand-in on the GPU machine: NeRF-family training never calls %s."""\n\n\ndef __getattr__(name):\n    raise ImportError("%s is not installed on this machine")\n' \
    "$stub" "$stub" >"$OUTDIR/site/$stub/__init__.py"
done
(cd "$OUTDIR" && tar czf site.tgz site && rm -rf site)
weights=$("$PY" -c "from eugen_nerf.eval.lpips_weights import weights_path; print(weights_path())")
[ -f "$weights" ] && gzip -c "$weights" >"$OUTDIR/alex.pth.gz" || echo "[gpu-bundle] no LPIPS weights: LPIPS will be omitted there" >&2
cp scripts/gpu_suite.sh "$OUTDIR/run.sh"
du -sh "$OUTDIR"
