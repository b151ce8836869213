#!/usr/bin/env bash
# Packs a self-contained attnfuzz for a GPU machine that has the stacks (PyTorch, JAX)
# but not attnfuzz's C libraries and no network: the release binary plus the shared
# libraries it needs beyond glibc (OpenBLAS, cJSON, xxHash, zstd, libpng, gfortran),
# gzip-compressed, into .gpu/ (git-ignored). scripts/gpu_campaign.sh unpacks and uses it
# when build/attnfuzz is missing or cannot load there.
#   scripts/pack_gpu.sh            -> .gpu/attnfuzz-dist.tar.gz (about 15 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/attnfuzz ] || scripts/setup.sh --no-python
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/dist/bin" "$stage/dist/lib" .gpu
cp build/attnfuzz "$stage/dist/bin/"
strip "$stage/dist/bin/attnfuzz"
# every resolved library except the C runtime itself, which the target machine has
ldd build/attnfuzz | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*) ;;
    *) cp -L "$lib" "$stage/dist/lib/" ;;
  esac
done
tar -C "$stage" -czf .gpu/attnfuzz-dist.tar.gz dist
ls -la .gpu/attnfuzz-dist.tar.gz
