#!/usr/bin/env bash
# Runs a command with every real CPU stack forced onto a lower instruction-set path, so that a
# machine with AVX-512 (or AMX) shows what an AVX2 user sees (docs/targets.md, "Lower ISA
# paths"):
#   scripts/lower_isa.sh avx2 COMMAND [ARGS...]     AVX2/FMA kernels only
#   scripts/lower_isa.sh avx512 COMMAND [ARGS...]   AVX-512 without AMX (nor AVX512_BF16/FP16)
# What it sets, by what reads it:
#   ATEN_CPU_CAPABILITY   PyTorch's ATen kernels and Inductor's vector ISA (pick_vec_isa reads
#                         it when torch._inductor.config.cpp.simdlen is unset)
#   ONEDNN_MAX_CPU_ISA    oneDNN (torch's mkldnn paths; OpenVINO's oneDNN primitives)
#   OV_CPU_MAX_ISA        OpenVINO's own CPU kernels (Snippets, SDPA): honoured by builds with
#                         debug caps only up to 2026.4 (openvino#36980; release builds from
#                         openvino#38257 on): a release wheel caps oneDNN alone
#   XLA_FLAGS             --xla_cpu_max_isa for jax's CPU backend
#   TORCHINDUCTOR_CACHE_DIR  a cache of Inductor's compiled code of its own (below)
#   ATTNFUZZ_CPU_FLAGS    the host's /proc/cpuinfo flags less those the cap hides (avx512*,
#                         amx*, avx_vnni* for avx2; amx*, avx512_bf16, avx512_fp16 for
#                         avx512): known entries' `needs` judge the run as on such a CPU
# ONNX Runtime (MLAS) and TVM's llvm target pick their kernels from CPUID alone: no cap.
set -euo pipefail
isa=${1:-}
shift || true
case $isa in
  avx2) aten=avx2 onednn=AVX2 xla=AVX2 hide='^(avx512.*|amx.*|avx_vnni.*)$' ;;
  avx512) aten=avx512 onednn=AVX512_CORE xla=AVX512 hide='^(amx.*|avx512_bf16|avx512_fp16)$' ;;
  *) echo "usage: scripts/lower_isa.sh avx2|avx512 COMMAND [ARGS...]" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || { echo "lower_isa.sh: no command" >&2; exit 2; }
flags=$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null | cut -d: -f2- || true)
export ATTNFUZZ_CPU_FLAGS=$(tr ' ' '\n' <<<"${ATTNFUZZ_CPU_FLAGS:-$flags}" | grep -v -E "$hide" | grep . | tr '\n' ' ')
export ATEN_CPU_CAPABILITY=$aten ONEDNN_MAX_CPU_ISA=$onednn OV_CPU_MAX_ISA=$onednn
export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_cpu_max_isa=$xla"
# Inductor's on-disk cache does not key its generated C++ on ATEN_CPU_CAPABILITY: a kernel
# written for one vector width and reused under another stores past its buffers (a run at the
# native ISA after one under this script aborted with "free(): invalid pointer"). Each
# capability gets a cache of its own.
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-${TMPDIR:-/tmp}/torchinductor_$(id -un)}-isa-$isa"
exec "$@"
