#!/usr/bin/env bash
# tandem's test command (README, .ci/run): every stage CI runs, in order,
# stopping at the first failure with a message that names the stage.
#
#   deps      scripts/install-deps.sh
#   format    clang-format check of every C++ file (scripts/lint.sh --format);
#             an unformatted file fails the run (TANDEM_FORMAT_ENFORCED=0:
#             report only)
#   build     RelWithDebInfo build with g++            (build dir: $TANDEM_BUILD_DIR, build/)
#             Every build here keeps line tables only (TANDEM_DEBUG_INFO=lines,
#             -g1: files and lines in backtraces and sanitizer reports), which
#             compiles about 40% faster than full debug information
#   unit      ctest: unit tests, 2 at a time
#   system    ctest: system tests (real processes, namespaces), one at a time
#   package   install into a temporary prefix; build and run tests/package/
#             against it with find_package(tandem)
#   asan-build  ASan+UBSan build with clang 14        ($TANDEM_ASAN_BUILD_DIR, build-asan/),
#             started in the background at idle CPU priority (SCHED_IDLE) as
#             soon as the g++ build is done (and in the idle I/O class), so
#             that it compiles on the CPU the
#             unit, system and package stages leave free (system tests mostly
#             wait on sockets and timeouts); a process at idle priority runs only
#             when no ordinary one wants the core, so the tests' timings are
#             those of an idle machine. Its output is kept in a log and shown
#             when the stage is awaited; its duration counts from the start,
#             and "awaited" says how long the run waited for it.
#             without the LibTorch example and the Python module (their C++ is
#             tandem's API, which the unit and system tests cover; compiling
#             LibTorch's headers under the sanitizers costs minutes of CI).
#             It is also the fuzz build (TANDEM_FUZZ=ON: libFuzzer's coverage
#             instrumentation on every source, and the fuzz targets): one
#             sanitized compile of the library instead of two
#   asan-tests  unit and system tests of that build, except the system test files in
#             $ASAN_SYSTEM_EXCLUDE: the example, Python and torch backend files (nothing to run),
#             and the multi-host fault bed and the ssh/mpirun beds, whose code paths
#             (launcher, membership, transport) the other files exercise under
#             ASan and which take ~8 minutes between them; they run in the g++
#             stage. So do the Slurm, Grid Engine and torchrun files (80 s
#             under ASan, mostly starting slurmctld, a Grid Engine cell or
#             torchrun): their contracts and launchers are unit tests here,
#             and the rest of each job is the launcher and cluster code of
#             the files that stay.
#   tsan-build  ThreadSanitizer build with clang 16   ($TANDEM_TSAN_BUILD_DIR, build-tsan/),
#             in the same background job after asan-build (so overlapping
#             asan-tests the same way):
#             only the unit binaries of the concurrent layers (tandem_threaded_tests:
#             the files of tandem_unit_tests with threaded suites, net and cluster;
#             tandem_kv_tests, tandem_collective_tests), no benchmarks, programs
#             or Python module
#   tsan-tests  those binaries under TSan, 2 at a time: tandem_kv_tests and
#             tandem_collective_tests whole (the latter in
#             $TSAN_COLLECTIVE_SHARDS processes one after the other, GoogleTest's
#             sharding; see tsan_tests), tandem_threaded_tests only its suites
#             that run threads ($TSAN_UNIT_FILTER below: transports (TCP,
#             in-process, reliable, metered), event loop, send-queue bound,
#             dispatcher, thread pool, cluster formation and membership, the
#             concurrent logger, stats and timeline suites); the codec,
#             launcher, contract and config suites are single-threaded and
#             left out. No system tests. Any
#             report fails the stage; tests/tsan.supp says what is suppressed
#             and why. Budget: ~10 minutes for both stages on 2 cores. Measured
#             2026-11-23 on the shared 2-core VM with load 11-13 (six builds at
#             once): tsan-build 2057 s from scratch without ccache (165 steps,
#             the whole library plus three test binaries), tsan-tests 284 s:
#             tandem_unit_tests (245 tests of the filter) and tandem_kv_tests
#             (404) side by side in ~150 s, then tandem_collective_tests (226).
#             The build is what exceeds the budget; with ccache (as every
#             other build here) a rebuild after a change is a few files.
#   fuzz      scripts/run-fuzzers.sh $TANDEM_FUZZ_SECONDS (10 s per target in CI,
#             thirteen targets, two at a time on 2 cores; 30 s each brought the
#             whole run to ~50 min, and 15 s cost 113 s of a run that CI took
#             53 minutes for) in the asan-build directory; longer runs are
#             for a person (scripts/run-fuzzers.sh 600)
#
# Measured 2026-11-27 from a fresh clone on the 2-core VM: 2982 s in all
# (build 615, unit 43, system 1119 with PyTorch's suite's 259, asan-build 1394
# of which 228 awaited, asan-tests 570, tsan-build 590 of which 20 awaited,
# tsan-tests 288, fuzz 79), against 2610 s earlier the same day; CI took
# 3214 s for about 2904 s here. Most of the growth was one test:
# AllReduceTest.EveryDTypeOpAndSizeMatchesTheReference had every rank
# generate every rank's inputs and reference (n^2 work per size), 190 of the
# collective binary's 237 s under ASan; it now computes them once per job.
# The builds measured alone earlier: asan 923 s, tsan 264 s.
# 2026-11-28, after PyTorch's suite went from spawned to forked processes
# (283 -> 39 s alone): 2881 s (build 691, unit 44, system 1009, asan-build
# 1301 of which 243 awaited, asan-tests 481, tsan-build 568 of which 88
# awaited, tsan-tests 227, fuzz 79). The sanitized build in the background
# is the critical path: a shorter system stage mostly lengthens the wait.
# 2026-11-28, with the framework engine's autotune: 2853 s (build 742, unit
# 44, system 941, asan-build 1163 of which 172 awaited, asan-tests 481,
# tsan-build 555 of which 74 awaited, tsan-tests 296, fuzz 79).
#
# clang-tidy is not a stage: it needs a build's compile commands, takes one to
# three minutes of both cores, and its findings need a person's judgement (a
# check that fires wrongly is tuned in .clang-tidy, not silenced in a hurry).
# Run scripts/lint.sh --tidy before sending a change.
#
# Environment: TANDEM_BUILD_DIR, TANDEM_ASAN_BUILD_DIR (also the fuzz build), TANDEM_TSAN_BUILD_DIR,
# TANDEM_FUZZ_SECONDS,
# TANDEM_FORMAT_ENFORCED (1: an unformatted file fails the run),
# TANDEM_SANITIZE_CC/TANDEM_SANITIZE_CXX (ASan and fuzz builds; default clang-14/clang++-14),
# TANDEM_TSAN_CC/TANDEM_TSAN_CXX (the TSan build; default clang-16/clang++-16),
# TANDEM_TSAN_COLLECTIVE_SHARDS (default 8).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD_DIR=${TANDEM_BUILD_DIR:-$ROOT/build}
ASAN_DIR=${TANDEM_ASAN_BUILD_DIR:-$ROOT/build-asan}
TSAN_DIR=${TANDEM_TSAN_BUILD_DIR:-$ROOT/build-tsan}
# System test files not run under ASan (see the header).
ASAN_SYSTEM_EXCLUDE='^system\.(test_fashion_mnist|test_checkpoint_restart|test_python_.*|test_torch_.*|test_faults_netbed|test_launch_ssh|test_launch_mpi_hosts|test_launch_slurm|test_launch_sge|test_launch_torchrun)$'
# The unit binaries built and run under ThreadSanitizer, and the suites of
# tandem_unit_tests that start threads (the rest of it is single-threaded).
TSAN_BINARIES=(tandem_threaded_tests tandem_kv_tests tandem_collective_tests)
TSAN_COLLECTIVE_SHARDS=${TANDEM_TSAN_COLLECTIVE_SHARDS:-8}
TSAN_UNIT_FILTER='*DoorbellTest.*:*DoorbellWakeTest.*:*TransportTest.*:*TcpMisbehaviourTest.*:*TransportPayloadTest.*:*EventLoopTest.*:*Reliable*:StatsRegistryRefresh.*:*SendQueueBound*:MessageDispatcher.*:*ThreadPool*:*ParallelFor*:Cluster.*:ClusterFormation.*:*ElasticMembership*:*LoggerConcurrencyTest.*:ConcurrentCounting.*:*TimelineTest.*'
FUZZ_SECONDS=${TANDEM_FUZZ_SECONDS:-10}
SANITIZE_CC=${TANDEM_SANITIZE_CC:-clang-14}
SANITIZE_CXX=${TANDEM_SANITIZE_CXX:-clang++-14}
# ThreadSanitizer from LLVM 16: TSan 14's runtime, once it has run out of
# thread slots and reset its clocks, takes every shadow word written before
# the reset for a race it then cannot confirm, and restores a stack for each
# under its global lock (google/sanitizers#1552, fixed in LLVM 15). Late in
# the collective binary that stalled 3 MiB allreduces for minutes (twice in
# CI, once in four runs here).
TSAN_CC=${TANDEM_TSAN_CC:-clang-16}
TSAN_CXX=${TANDEM_TSAN_CXX:-clang++-16}
# Every C++ file is formatted as .clang-format says (scripts/lint.sh --format
# --fix formats the tree); TANDEM_FORMAT_ENFORCED=0 only reports.
FORMAT_ENFORCED=${TANDEM_FORMAT_ENFORCED:-1}
LOG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tandem-test.XXXXXX")

STAGE_NAMES=()
STAGE_SECONDS=()
TESTS_TOTAL=0
TESTS_FAILED=0

summary() {
  echo
  echo "== stage durations"
  local i
  for i in "${!STAGE_NAMES[@]}"; do
    printf '   %-10s %5ds\n' "${STAGE_NAMES[$i]}" "${STAGE_SECONDS[$i]}"
  done
}

# stage NAME COMMAND...: runs COMMAND with `set -e` in force, times it, and
# stops the whole run if it fails.
stage() {
  local name=$1
  shift
  echo
  echo "== stage $name: $*"
  local start=$SECONDS rc
  set +e
  (set -e; "$@")
  rc=$?
  set -e
  STAGE_NAMES+=("$name")
  STAGE_SECONDS+=($((SECONDS - start)))
  if [[ $rc -ne 0 ]]; then
    summary
    echo
    echo "test.sh: FAILED in stage '$name' (exit code $rc, after $((SECONDS - start))s)" >&2
    exit 1
  fi
  echo "== stage $name passed in $((SECONDS - start))s"
}

# run_ctest BUILD_DIR LABEL CTEST_ARGS...: runs ctest, echoing its output, and
# adds its counts to the totals of the closing line.
run_ctest() {
  local dir=$1 label=$2
  shift 2
  local log="$LOG_DIR/ctest-$label.log"
  local rc=0
  ctest --test-dir "$dir" --output-on-failure --no-tests=error "$@" 2>&1 | tee "$log" || rc=$?
  local counts
  counts=$(sed -n 's/.*tests passed, \([0-9]*\) tests\{0,1\} failed out of \([0-9]*\).*/\1 \2/p' "$log" |
           tail -n 1)
  if [[ -n "$counts" ]]; then
    TESTS_FAILED=$((TESTS_FAILED + ${counts% *}))
    TESTS_TOTAL=$((TESTS_TOTAL + ${counts#* }))
    echo "$TESTS_TOTAL $TESTS_FAILED" > "$LOG_DIR/counts"
  fi
  return "$rc"
}

# The stages below run in subshells; the counts travel through a file.
load_counts() {
  if [[ -f "$LOG_DIR/counts" ]]; then
    read -r TESTS_TOTAL TESTS_FAILED < "$LOG_DIR/counts"
  fi
}

format_check() {
  if [[ $FORMAT_ENFORCED == 1 ]]; then
    scripts/lint.sh --format
  elif ! scripts/lint.sh --format; then
    echo "(formatting is reported, not enforced: TANDEM_FORMAT_ENFORCED=1 enforces it)"
  fi
}

unit_tests() {
  load_counts
  run_ctest "$1" "unit-$(basename "$1")" -E '^system\.' -j 2 --timeout 300
}

# System tests start whole jobs (7 processes each) and measure timeouts: one at
# a time, so that they do not starve each other on 2 cores.
# system_tests BUILD_DIR [CTEST_ARGS...]
system_tests() {
  load_counts
  local dir=$1
  shift
  run_ctest "$dir" "system-$(basename "$dir")" -R '^system\.' --timeout 900 "$@"
}

sanitized_build() {
  if [[ ! -f "$ASAN_DIR/CMakeCache.txt" ]]; then
    export CC=$SANITIZE_CC CXX=$SANITIZE_CXX
  fi
  scripts/build.sh "$ASAN_DIR" -DTANDEM_SANITIZE=ON -DTANDEM_FUZZ=ON -DTANDEM_BUILD_BENCH=OFF \
    -DTANDEM_BUILD_EXAMPLES=OFF -DTANDEM_BUILD_PYTHON=OFF -DTANDEM_DEBUG_INFO=lines
}

sanitized_tests() {
  # Any report fails the test that produced it; child processes inherit these.
  export ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  if [[ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]]; then
    export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
  fi
  unit_tests "$ASAN_DIR"
  system_tests "$ASAN_DIR" -E "$ASAN_SYSTEM_EXCLUDE"
}

tsan_build() {
  local configure=(cmake -S "$ROOT" -B "$TSAN_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo
                   -DTANDEM_TSAN=ON -DTANDEM_BUILD_BENCH=OFF -DTANDEM_BUILD_PYTHON=OFF
                   -DTANDEM_DEBUG_INFO=lines)
  # A build directory configured with another compiler starts over.
  if [[ -f "$TSAN_DIR/CMakeCache.txt" ]] &&
    ! grep -q "^CMAKE_CXX_COMPILER:FILEPATH=.*/$TSAN_CXX\$" "$TSAN_DIR/CMakeCache.txt"; then
    rm -rf "$TSAN_DIR/CMakeCache.txt" "$TSAN_DIR/CMakeFiles"
  fi
  if [[ ! -f "$TSAN_DIR/CMakeCache.txt" ]]; then
    export CC=$TSAN_CC CXX=$TSAN_CXX
    if command -v ninja >/dev/null 2>&1; then configure+=(-G Ninja); fi
  fi
  "${configure[@]}"
  cmake --build "$TSAN_DIR" -j "$(nproc)" --target "${TSAN_BINARIES[@]}"
}

# tsan_run BINARY [GTEST ARGS...]: one binary under TSan; its log is kept
# and shown when it fails.
tsan_run() {
  local bin=$1
  shift
  local name=$bin${GTEST_SHARD_INDEX:+ (shard $((GTEST_SHARD_INDEX + 1)) of $GTEST_TOTAL_SHARDS)}
  local log="$LOG_DIR/tsan-$bin${GTEST_SHARD_INDEX:+-shard$GTEST_SHARD_INDEX}.log"
  if "$TSAN_DIR/bin/$bin" --gtest_brief=1 "$@" >"$log" 2>&1; then
    echo "   $name: $(grep -E '^\[  PASSED  \]' "$log" || echo passed)"
  else
    echo "   $name: FAILED (log follows)" >&2
    cat "$log" >&2
    # The log's end is what a CI page shows: repeat what failed there (the
    # failed tests, each failure's first lines, a sanitizer's report head).
    echo "   $name: what failed, from the log above:" >&2
    grep -E -A6 '(: Failure$|^\[  FAILED  \]|WARNING: ThreadSanitizer|^SUMMARY: )' "$log" |
      grep -v -E ' [EW]\] ' | head -n 80 >&2 || true
    return 1
  fi
}

tsan_tests() {
  # halt_on_error: the first report ends the binary with a failure.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$ROOT/tests/tsan.supp"
  if [[ -x /usr/lib/llvm-16/bin/llvm-symbolizer ]]; then
    export TSAN_SYMBOLIZER_PATH=/usr/lib/llvm-16/bin/llvm-symbolizer
  fi
  local pids=() rc=0 p
  tsan_run tandem_threaded_tests --gtest_filter="$TSAN_UNIT_FILTER" & pids+=($!)
  tsan_run tandem_kv_tests & pids+=($!)
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  # The collective binary in TSAN_COLLECTIVE_SHARDS processes, one after the
  # other (GoogleTest's sharding): TSan resets its clocks once a process has
  # used up its thread slots, and the stale shadow words that a reset leaves
  # cost a stack restore each (see TSAN_CC above); fewer tests per process,
  # fewer resets.
  local shard
  for ((shard = 0; shard < TSAN_COLLECTIVE_SHARDS; shard++)); do
    GTEST_TOTAL_SHARDS=$TSAN_COLLECTIVE_SHARDS GTEST_SHARD_INDEX=$shard \
      tsan_run tandem_collective_tests || rc=1
  done
  return "$rc"
}

fuzzers() {
  if [[ -f scripts/run-fuzzers.sh ]]; then
    TANDEM_FUZZ_BUILD_DIR=$ASAN_DIR bash scripts/run-fuzzers.sh "$FUZZ_SECONDS"
  else
    echo "no scripts/run-fuzzers.sh in this tree: nothing to fuzz"
  fi
}

package_check() {
  local prefix="$LOG_DIR/prefix" consumer="$LOG_DIR/consumer"
  cmake --install "$BUILD_DIR" --prefix "$prefix"
  cmake -S tests/package -B "$consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo
  cmake --build "$consumer" -j "$(nproc)"
  "$consumer/tandem_consumer"
  "$consumer/tandem_consumer_static"
}

# The background job: the sanitized builds, one after the other, at idle CPU
# priority. Each writes its log to $LOG_DIR/NAME.log and, when done, its exit
# code to $LOG_DIR/NAME.rc and its duration to $LOG_DIR/NAME.seconds.
BACKGROUND_PID=
background_builds() {
  chrt --idle --pid 0 "$BASHPID"
  ionice -c 3 -p "$BASHPID" 2>/dev/null || true  # idle I/O class too, where the scheduler has one
  local name fn start rc
  for name in asan-build tsan-build; do
    case $name in
      asan-build) fn=sanitized_build ;;
      tsan-build) fn=tsan_build ;;
    esac
    start=$SECONDS
    rc=0
    (set -e; "$fn") >"$LOG_DIR/$name.log" 2>&1 || rc=$?
    echo $((SECONDS - start)) >"$LOG_DIR/$name.seconds"
    echo "$rc" >"$LOG_DIR/$name.rc"
    [[ $rc -eq 0 ]] || return "$rc"
  done
}

# kill_tree PID: stops PID and every process below it (children first).
kill_tree() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    kill_tree "$child"
  done
  kill "$1" 2>/dev/null || true
}

# await_build NAME: waits for the background job to finish the build NAME,
# shows its log's tail, and records it as a stage (its own duration, and how
# long the run waited for it). A failed or vanished build fails the run.
await_build() {
  local name=$1 start=$SECONDS rc seconds waited=0 report_at=$((SECONDS + 60))
  echo
  echo "== stage $name: awaiting the background build"
  while [[ ! -f "$LOG_DIR/$name.rc" ]]; do
    if ! kill -0 "$BACKGROUND_PID" 2>/dev/null; then
      echo "test.sh: the background job ended before finishing '$name'" >&2
      tail -n 50 "$LOG_DIR/$name.log" >&2 || true
      summary
      exit 1
    fi
    if ((SECONDS >= report_at)); then
      echo "   still building $name ($(wc -l <"$LOG_DIR/$name.log") log lines so far)"
      report_at=$((SECONDS + 60))
    fi
    sleep 1
  done
  rc=$(cat "$LOG_DIR/$name.rc")
  seconds=$(cat "$LOG_DIR/$name.seconds")
  waited=$((SECONDS - start))
  tail -n 20 "$LOG_DIR/$name.log"
  STAGE_NAMES+=("$name")
  STAGE_SECONDS+=("$seconds")
  STAGE_NAMES+=("  awaited")
  STAGE_SECONDS+=("$waited")
  if [[ $rc -ne 0 ]]; then
    echo "== the log of $name:" >&2
    cat "$LOG_DIR/$name.log" >&2
    summary
    echo
    echo "test.sh: FAILED in stage '$name' (exit code $rc, after ${seconds}s)" >&2
    exit 1
  fi
  echo "== stage $name passed in ${seconds}s (waited ${waited}s for it)"
}

trap '[[ -n $BACKGROUND_PID ]] && kill_tree "$BACKGROUND_PID"; rm -rf "$LOG_DIR"' EXIT

START=$SECONDS
stage deps scripts/install-deps.sh
stage format format_check
stage build scripts/build.sh "$BUILD_DIR" -DTANDEM_DEBUG_INFO=lines
background_builds &
BACKGROUND_PID=$!
echo
echo "== asan-build and tsan-build started in the background at idle priority (pid $BACKGROUND_PID)"
stage unit unit_tests "$BUILD_DIR"
stage system system_tests "$BUILD_DIR"
stage package package_check
await_build asan-build
stage asan-tests sanitized_tests
await_build tsan-build
wait "$BACKGROUND_PID"
BACKGROUND_PID=
stage tsan-tests tsan_tests
stage fuzz fuzzers
load_counts
summary
printf '   %-10s %5ds\n' total $((SECONDS - START))
echo
echo "test.sh: all stages passed"
echo "ctest entries (unit binaries in shards, system test files): $((TESTS_TOTAL - TESTS_FAILED)) passed, $TESTS_FAILED failed"
