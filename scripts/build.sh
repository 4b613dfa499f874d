#!/usr/bin/env bash
# Configures (once) and builds incrementally. BUILD_DIR and CMAKE_ARGS may be overridden.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$here/build}"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} ${CMAKE_ARGS:-}
fi
cmake --build "$build" -j "$(nproc)" "$@"
