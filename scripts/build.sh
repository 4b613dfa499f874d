#!/usr/bin/env bash
# Configures (once) and builds incrementally. BUILD_DIR and CMAKE_ARGS may be overridden.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$here/build}"
launcher=()
# A compiler cache, where the machine has one, turns a clean clone's 30-minute build into minutes;
# nothing requires it.
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "${launcher[@]}" ${CMAKE_ARGS:-}
fi
cmake --build "$build" -j "$(nproc)" "$@"
