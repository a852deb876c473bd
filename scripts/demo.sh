#!/usr/bin/env bash
# `make demo`: train a small EUGen field on a shipped scene on the CPU (a few minutes), then evaluate it.
# Uses the stock nerfstudio command line; everything lands in outputs/demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
SCENE=${1:-scenes/bunny64}
STEPS=${DEMO_STEPS:-200}
BIN=.venv/bin

"$BIN/eugen-scenes" check "$SCENE"
echo "[demo] training eugen-nerfacto on $SCENE for $STEPS steps (CPU-sized settings; Ctrl-C keeps the last checkpoint)"
"$BIN/ns-train" eugen-nerfacto --data "$SCENE" \
  --output-dir outputs --experiment-name demo --timestamp latest \
  --max-num-iterations "$STEPS" --steps-per-save 100 --steps-per-eval-image 1000000 --steps-per-eval-all-images 1000000 \
  --pipeline.datamanager.train-num-rays-per-batch 512 \
  --pipeline.model.num-proposal-samples-per-ray 64 32 --pipeline.model.num-nerf-samples-per-ray 32 \
  --pipeline.model.max-res 512 --pipeline.model.log2-hashmap-size 16
config=outputs/demo/eugen-nerfacto/latest/config.yml
echo "[demo] evaluating $config on the test split"
"$BIN/eugen-eval" --load-config "$config" --output outputs/demo/report.json --plots outputs/demo/plots
echo "[demo] report: outputs/demo/report.json, plots and error images: outputs/demo/plots/"
