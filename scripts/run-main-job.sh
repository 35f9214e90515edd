#!/usr/bin/env bash
# tandem's main job (README): installs the dependencies, builds, and runs a
# real job through `tandem launch` on this machine: 1 scheduler, 2 servers and
# 4 workers form a cluster and run 100 barriers across their groups. Exits
# with the job's exit code.
#
# Usage: scripts/run-main-job.sh [BUILD_DIR]     (default build/)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-$ROOT/build}

"$ROOT/scripts/install-deps.sh"
"$ROOT/scripts/build.sh" "$BUILD_DIR"

echo "run-main-job: tandem launch --launcher local -n 4 -s 2 (cluster_check, 100 barriers)"
set +e
"$BUILD_DIR/bin/tandem" launch --launcher local -n 4 -s 2 --command-runs-all-roles \
  -- "$BUILD_DIR/bin/cluster_check" --barriers 100
code=$?
set -e
echo "run-main-job: the job exited with code $code"
exit "$code"
