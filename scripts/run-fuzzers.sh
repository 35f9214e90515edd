#!/bin/bash
# Builds the libFuzzer targets of tests/fuzz/ with clang-14 (ASan + UBSan) and
# runs each for SECONDS (default 60) starting from its seed corpus in
# tests/fuzz/corpus/<target>/. Exits non-zero if any target crashes, leaks,
# trips a sanitizer or breaks one of its invariants.
#
#   scripts/run-fuzzers.sh [SECONDS]
#
# Build directory: $TANDEM_FUZZ_BUILD_DIR, else <repo>/build-fuzz (one that
# was configured with -DTANDEM_FUZZ=ON is reused as it is). Inputs the
# fuzzer finds interesting accumulate in <build>/fuzz-corpus/<target>/ (the
# committed seeds are never modified); a failing input is written to
# <build>/fuzz-findings/<target>/ and its log to <build>/fuzz-<target>.log.
# Reproduce a finding with: <build>/bin/fuzz/<target> <finding-file>
#
# Every tests/fuzz/<name>_fuzz.cc is a target (tests/fuzz/CMakeLists.txt lists
# them); each must have a committed seed corpus, or this script fails.
set -euo pipefail

seconds=${1:-60}
if ! [[ $seconds =~ ^[0-9]+$ ]] || [[ $seconds -eq 0 ]]; then
  echo "usage: $0 [SECONDS]   (SECONDS must be a positive integer, got '$seconds')" >&2
  exit 2
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TANDEM_FUZZ_BUILD_DIR:-$repo/build-fuzz}

# A build directory already configured with TANDEM_FUZZ=ON (CI's sanitizer
# build, scripts/test.sh) is used as it is; any other is configured for the
# fuzz targets alone.
if ! grep -qs '^TANDEM_FUZZ:BOOL=ON$' "$build/CMakeCache.txt"; then
  CC=clang-14 CXX=clang++-14 cmake -S "$repo" -B "$build" \
    -DTANDEM_FUZZ=ON -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j2 --target fuzzers

# fuzz_one TARGET: fuzzes one target for $seconds; prints one line and exits
# non-zero when the target failed.
fuzz_one() {
  local target=$1 name seeds work findings log rc execs rss
  name=$(basename "$target")
  seeds=$repo/tests/fuzz/corpus/$name
  work=$build/fuzz-corpus/$name
  findings=$build/fuzz-findings/$name
  log=$build/fuzz-$name.log
  mkdir -p "$work" "$findings"
  [[ -d $seeds ]] || { echo "$name: no seed corpus at $seeds" >&2; return 1; }
  rc=0
  "$target" -max_total_time="$seconds" -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$work" "$seeds" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log")
  if [[ $rc -ne 0 ]]; then
    echo "$name: FAILED (exit $rc); see $log and $findings/" >&2
    grep -E "ERROR|SUMMARY|invariant violated|Test unit written" "$log" >&2 || true
    return 1
  fi
  echo "$name: ok, ${execs:-?} executions, peak RSS ${rss:-?} MB, corpus $(ls "$work" | wc -l) files"
}

# The targets run $jobs at a time (TANDEM_FUZZ_JOBS, default: the number of
# cores); each is one single-threaded process.
jobs=${TANDEM_FUZZ_JOBS:-$(nproc)}
declare -A running=()
failed=()
# reap_one: waits for any running target and records it if it failed.
reap_one() {
  local done_pid=
  wait -n -p done_pid "${!running[@]}" || failed+=("${running[$done_pid]}")
  unset "running[$done_pid]"
}
echo "== fuzzing every target for ${seconds}s, $jobs at a time"
for target in "$build"/bin/fuzz/*_fuzz; do
  while [[ ${#running[@]} -ge $jobs ]]; do reap_one; done
  fuzz_one "$target" &
  running[$!]=$(basename "$target")
done
while [[ ${#running[@]} -gt 0 ]]; do reap_one; done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzzing failed: ${failed[*]}" >&2
  exit 1
fi
echo "all fuzz targets ran ${seconds}s without a finding"
