#!/usr/bin/env bash
# Checks formatting and runs clang-tidy.
#
# Usage: scripts/lint.sh [--format] [--tidy] [--fix] [BUILD_DIR]
#   --format   clang-format --dry-run -Werror over every C++ file of the tree
#   --tidy     clang-tidy (.clang-tidy) over src/, with BUILD_DIR's
#              compile_commands.json (BUILD_DIR defaults to build/; it is
#              configured first if it has none)
#   --fix      rewrite files instead of reporting: clang-format -i, and
#              clang-tidy's fixes
#   Neither --format nor --tidy: both. Exits non-zero on any finding.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
do_format=0 do_tidy=0 fix=0 build_dir=$ROOT/build
for arg in "$@"; do
  case "$arg" in
    --format) do_format=1 ;;
    --tidy) do_tidy=1 ;;
    --fix) fix=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "lint.sh: unknown option $arg" >&2; exit 2 ;;
    *) build_dir=$arg ;;
  esac
done
if [[ $do_format -eq 0 && $do_tidy -eq 0 ]]; then
  do_format=1 do_tidy=1
fi

# The tree's C++ files: tracked and new ones, not ignored, not in build dirs.
cxx_files() {
  local dirs=(include src tests bench examples python)
  local existing=()
  local d
  for d in "${dirs[@]}"; do [[ -d $d ]] && existing+=("$d"); done
  [[ ${#existing[@]} -eq 0 ]] && return 0
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- "${existing[@]}" |
      grep -E '\.(cc|h|cpp|hpp)$' | while read -r f; do [[ -f $f ]] && echo "$f"; done
  else
    find "${existing[@]}" -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' \)
  fi
}

status=0
if [[ $do_format -eq 1 ]]; then
  mapfile -t files < <(cxx_files | sort)
  if [[ $fix -eq 1 ]]; then
    clang-format -i "${files[@]}"
    echo "lint: formatted ${#files[@]} files"
  else
    bad=()
    for f in "${files[@]}"; do
      clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
    done
    if [[ ${#bad[@]} -gt 0 ]]; then
      echo "lint: ${#bad[@]} of ${#files[@]} files are not formatted as .clang-format says:"
      printf '  %s\n' "${bad[@]}"
      echo "  (see a file's changes with: clang-format FILE | diff FILE -; apply: scripts/lint.sh --format --fix)"
      status=1
    else
      echo "lint: all ${#files[@]} C++ files formatted"
    fi
  fi
fi

if [[ $do_tidy -eq 1 ]]; then
  if [[ ! -f "$build_dir/compile_commands.json" ]]; then
    cmake -S "$ROOT" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  mapfile -t sources < <(cxx_files | grep -E '^src/.*\.cc$' | sort)
  args=(-p "$build_dir" -quiet -j "$(nproc)"
        -extra-arg=-Wno-unknown-warning-option -header-filter='.*/(src|include)/.*')
  [[ $fix -eq 1 ]] && args+=(-fix)
  # run-clang-tidy takes regexes; anchor each file's absolute path.
  regexes=()
  for f in "${sources[@]}"; do regexes+=("^$ROOT/$f\$"); done
  # Findings in a header repeat once per file that includes it; the count is of
  # distinct ones.
  run-clang-tidy "${args[@]}" "${regexes[@]}" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' |
    tee "$build_dir/clang-tidy.log" |
    grep -v -E '^([0-9]+ warnings? generated|Suppressed [0-9]+ warnings|Use -header-filter)' || true
  if grep -qE ': (warning|error): ' "$build_dir/clang-tidy.log"; then
    count=$(grep -E ': (warning|error): ' "$build_dir/clang-tidy.log" | sort -u | wc -l)
    echo "lint: clang-tidy found $count problems (log: $build_dir/clang-tidy.log)"
    status=1
  else
    echo "lint: clang-tidy clean over ${#sources[@]} files"
  fi
fi
exit $status
