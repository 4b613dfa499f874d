#!/usr/bin/env bash
# Builds and runs every benchmark in tests/bench/; each prints its figures and its ratio against a
# baseline measured in the same run. Extra arguments go to every benchmark (e.g. --full).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
"$here/scripts/deps.sh"
BUILD_DIR="${BUILD_DIR:-$here/build}" "$here/scripts/build.sh" >/dev/null
for b in "${BUILD_DIR:-$here/build}"/tests/bench/bench_*; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b" "$@"
done
