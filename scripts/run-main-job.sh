#!/usr/bin/env bash
# tandem's main job (README, docs/training.md): installs the dependencies,
# builds, and trains a small CNN on Fashion-MNIST through `tandem launch` on
# this machine: 1 scheduler, 1 server and 2 workers, gradients summed by the
# parameter server (dist_sync), SGD on the server, 2 epochs. Prints the final
# test accuracy and exits with the job's exit code (1 also when the accuracy
# is below 85%).
#
# Usage: scripts/run-main-job.sh [BUILD_DIR] [-- EXTRA TRAINER ARGS...]
#   BUILD_DIR defaults to build/. Extra arguments go to fashion_mnist_train
#   after ours (so they win), e.g. -- --epochs 1 or -- --kvstore dist_async.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=$ROOT/build
if [[ $# -gt 0 && "$1" != "--" ]]; then
  BUILD_DIR=$1
  shift
fi
[[ $# -gt 0 && "$1" == "--" ]] && shift
EXTRA=("$@")

"$ROOT/scripts/install-deps.sh"
"$ROOT/scripts/build.sh" "$BUILD_DIR"

TRAINER=$BUILD_DIR/bin/fashion_mnist_train
if [[ ! -x "$TRAINER" ]]; then
  echo "run-main-job: $TRAINER was not built (LibTorch not found? see the cmake output)" >&2
  exit 1
fi

echo "run-main-job: tandem launch --launcher local -n 2 -s 1 -- fashion_mnist_train --kvstore dist_sync --epochs 2"
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
start=$(date +%s)
set +e
"$BUILD_DIR/bin/tandem" launch --launcher local -n 2 -s 1 \
  -- "$TRAINER" --kvstore dist_sync --epochs 2 --batch-size 64 --lr 0.05 --momentum 0.9 \
  "${EXTRA[@]}" 2>&1 | tee "$LOG"
code=${PIPESTATUS[0]}
set -e
elapsed=$(($(date +%s) - start))
accuracy=$(sed -n 's/.*final test accuracy: \([0-9.]*\).*/\1/p' "$LOG" | tail -1)
echo "run-main-job: the job exited with code $code after ${elapsed} s"
if [[ -z "$accuracy" ]]; then
  echo "run-main-job: no final accuracy was printed" >&2
  exit $((code == 0 ? 1 : code))
fi
echo "run-main-job: final test accuracy $accuracy"
if [[ $code -eq 0 ]] && ! awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.85) }'; then
  echo "run-main-job: the accuracy is below 0.85" >&2
  code=1
fi
exit "$code"
