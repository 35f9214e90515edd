#!/usr/bin/env bash
# Configures and builds tandem.
#
# Usage: scripts/build.sh [BUILD_DIR] [EXTRA CMAKE ARGS...]
#   BUILD_DIR defaults to build/ in the repository root. Extra arguments go to
#   the configure step after ours, so they win (e.g. -DCMAKE_BUILD_TYPE=Debug,
#   -DTANDEM_SANITIZE=ON). Set CC/CXX to pick the compiler of a new build dir.
#   Uses Ninja when it is installed, unless the build dir was already
#   configured with another generator.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${1:-$ROOT/build}
shift || true

CONFIGURE=(cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
  CONFIGURE+=(-G Ninja)
fi
"${CONFIGURE[@]}" "$@"
cmake --build "$BUILD_DIR" -j "$(nproc)"
