#!/usr/bin/env bash
# Installs the Debian packages PoolScope needs, only those missing. Used by run.sh and test.sh.
set -euo pipefail
PKGS=(build-essential cmake pkg-config qt6-base-dev qt6-svg-dev libgl-dev libqcustomplot-dev
      nlohmann-json3-dev libcli11-dev libzstd-dev zlib1g-dev zstd python3
      # a compiler cache: scripts/build.sh uses it, so a rebuild or a second clone takes minutes, not 30
      ccache
      # the Debian package and its test (tests/install/): cpack's Depends, the desktop entry, MIME type
      dpkg-dev desktop-file-utils shared-mime-info hicolor-icon-theme libglib2.0-bin libxml2-utils)
[ "${POOLSCOPE_WANT_CLANG:-0}" = 1 ] && PKGS+=(clang libclang-rt-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "poolscope: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
