#!/usr/bin/env bash
# Runs a training suite (eugen_nerf.bench.suites.methods) on a lent GPU machine from the bundle that
# scripts/gpu_bundle.sh packs, and brings back what a later run needs to continue it. Run there, from the
# repository root, with .gpu-bundle carried:
#   bash .gpu-bundle/run.sh SECONDS SUITE-ARGS...
# SECONDS: when to stop the suite if it is still training (SIGTERM: each run saves its last finished step
# and the time its chunk has cost, and continues from there). SUITE-ARGS: the suite's arguments without --output-dir and --out, which are
# set here. Writes into $OUT: report.json and report.png (when the suite finished), suite.log, runs.tgz (the
# run folders without checkpoints) and each run's newest checkpoint, whole (the device tool brings back at
# most 8 files: up to 4 runs' checkpoints). Unpack runs.tgz into a work
# folder here, put each checkpoint back into its run's nerfstudio_models/, and the same suite command with
# that --output-dir continues or reuses every run.
set -u
deadline=$(($(date +%s) + $1)); shift
bundle=$(dirname "$0")
mkdir -p /tmp/gpu/lpips /tmp/work /tmp/res
tar xzf "$bundle/site.tgz" -C /tmp/gpu
[ -f "$bundle/alex.pth.gz" ] && gunzip -c "$bundle/alex.pth.gz" >/tmp/gpu/lpips/alex.pth
export PYTHONPATH=/tmp/gpu/site:$PWD EUGEN_NERF_CACHE=/tmp/gpu PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi -L
python3 -c "import nerfstudio.configs.method_configs, eugen_nerf.bench.suites.methods" || exit 3
python3 -m eugen_nerf.bench.suites.methods "$@" --output-dir /tmp/work --out /tmp/res/report.json \
  >/tmp/res/suite.log 2>&1 &
suite=$!
while kill -0 $suite 2>/dev/null && [ "$(date +%s)" -lt $deadline ]; do sleep 5; done
if kill -0 $suite 2>/dev/null; then
  echo "[gpu-suite] deadline reached: stopping the suite"
  kill $suite
  wait $suite
fi
grep -v "Warning\|No framing" /tmp/res/suite.log | grep "validation PSNR\|seed .*PSNR\|wrote\|Error" | tail -40
cp /tmp/res/* "$OUT"/
(cd /tmp/work && tar czf "$OUT/runs.tgz" --exclude='*.ckpt' .)
for models in $(find /tmp/work -name nerfstudio_models); do
  newest=$(ls "$models"/*.ckpt 2>/dev/null | tail -1)
  [ -n "$newest" ] && cp "$newest" "$OUT/$(basename "$(dirname "$models")")_$(basename "$newest")"
done
ls -la "$OUT"
