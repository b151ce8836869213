#!/usr/bin/env bash
# Installs those of the named Debian packages that are missing (apt-get, through sudo when
# not root); packages already present are left as they are. scripts/setup.sh and
# scripts/build_wheel.sh name theirs.
#   scripts/apt_install.sh PACKAGE...
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0
echo "apt_install: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
