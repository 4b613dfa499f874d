#!/usr/bin/env bash
# One command: install what is missing, build, run every test suite.
#   ./test.sh             all suites (GUI ones offscreen)
#   ./test.sh --sanitize  the same under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$here/build"
args=()
if [ "${1:-}" = "--sanitize" ]; then
  build="$here/build-asan"
  export CMAKE_ARGS="-DPOOLSCOPE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug"
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  shift
fi
"$here/scripts/deps.sh"
BUILD_DIR="$build" "$here/scripts/build.sh"
export QT_QPA_PLATFORM=offscreen
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
