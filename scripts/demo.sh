#!/usr/bin/env bash
# `make demo`: the promise of EUGen layers in one table and one picture, on a 2-core CPU in minutes.
#
# 1. The EUGen student of the shipped dense NeRF teacher (the paper's 8x256 NeRF, trained on scenes/shiny128:
#    glossy, metallic and textured objects rendered by Blender), made by eugen-distill with its defaults: one
#    ridge solve per layer, then a short refinement of each layer on its own captured inputs and outputs, no
#    gradient through the field. The student made that way ships beside its teacher (TEACHER-student/);
#    DEMO_DISTILL=1 distils it again here (about 2 more minutes on a 2-core CPU), as does any other TEACHER.
# 2. eugen-eval scores both on the same test views (PSNR / SSIM / LPIPS), times their renders side by side,
#    counts parameters, measures each one's render memory in a fresh process, and writes a picture:
#    teacher | student | ground truth | difference.
# Everything lands in outputs/demo/. A second run reuses the student (delete outputs/demo to start over).
set -euo pipefail
cd "$(dirname "$0")/.."
TEACHER=${TEACHER:-teachers/shiny128/dense-nerf/paper}
VIEWS=${DEMO_VIEWS:-3}
OUT=${DEMO_OUT:-outputs/demo}
DISTILL_ARGS=${DEMO_DISTILL_ARGS:-}  # extra eugen-distill flags (the tests make a tiny student)
BIN=.venv/bin

[ -f "$TEACHER/config.yml" ] || { echo "[demo] no teacher at $TEACHER (its config.yml is missing)" >&2; exit 1; }
[ -x "$BIN/eugen-distill" ] || { echo "[demo] no environment in .venv: run bash scripts/setup.sh (make demo does)" >&2; exit 1; }
mkdir -p "$OUT"
SHIPPED="${TEACHER%/}-student"
if [ "${DEMO_DISTILL:-0}" != 1 ] && [ -z "$DISTILL_ARGS" ] && [ -f "$SHIPPED/config.yml" ]; then
  STUDENT=$SHIPPED
  echo "[demo] the shipped student of $TEACHER: $STUDENT (eugen-distill's defaults; DEMO_DISTILL=1 distils it again)"
elif [ -f "$OUT/student/config.yml" ]; then
  STUDENT=$OUT/student
  echo "[demo] reusing the student in $STUDENT"
else
  STUDENT=$OUT/student
  echo "[demo] distilling $TEACHER into an EUGen student (eugen-distill's defaults)"
  # shellcheck disable=SC2086  # DISTILL_ARGS is a list of flags
  "$BIN/eugen-distill" --teacher "$TEACHER" --output-dir "$STUDENT" --no-evaluate $DISTILL_ARGS
fi
echo "[demo] comparing teacher and student on $VIEWS test views"
"$BIN/eugen-eval" --load-config "$TEACHER/config.yml" "$STUDENT/config.yml" --names "dense teacher" "EUGen student" \
  --max-views "$VIEWS" --repeats 1 --field-points 16384 --output "$OUT/report.json" \
  --side-by-side "$OUT/side_by_side.png"
echo "[demo] the picture: $OUT/side_by_side.png (teacher | student | ground truth | difference x4)"
echo "[demo] next: train your own at CPU size (about an hour on 2 cores; README.md, Quick start, also trains its dense twin):"
echo "  .venv/bin/ns-train eugen-nerf --data scenes/shiny128 --max-num-iterations 3000 --pipeline.datamanager.train-num-rays-per-batch 256 --pipeline.model.num-coarse-samples 32 --pipeline.model.num-importance-samples 32"
