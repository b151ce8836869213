#!/bin/bash -eu
# ClusterFuzzLite / OSS-Fuzz build of the attnfuzz harness (fuzz/harness.c).
#
# The environment gives $CC, $CFLAGS (optimization, sanitizer and coverage flags,
# -fsanitize=fuzzer-no-link among them), $LIB_FUZZING_ENGINE (how to link the engine),
# $SRC and $OUT. The harness is built by the project's own CMake in libfuzzer mode with
# its instrumentation switched off (CFLAGS already instrument everything) and linked
# with $LIB_FUZZING_ENGINE, so every engine ClusterFuzzLite offers links the same
# LLVMFuzzerTestOneInput (the custom mutator and extra counters are libFuzzer's bonus).

build=$WORK/attnfuzz-build
cmake -S "$SRC/attnfuzz" -B "$build" \
    -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$CFLAGS" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2" \
    -DAF_TESTS=OFF -DAF_SANITIZE=OFF \
    -DAF_FUZZ_ENGINE=libfuzzer -DAF_FUZZ_CFLAGS= -DAF_FUZZ_LIB_CFLAGS= \
    -DAF_FUZZ_LINK="$LIB_FUZZING_ENGINE"
cmake --build "$build" -j"$(nproc)" --target attnfuzz_harness

fuzzer=attnfuzz_harness
cp "$build/fuzz/$fuzzer" "$OUT/"

# The runner image has none of the shared libraries the harness needs (OpenBLAS and its
# Fortran runtime, cJSON, zstd, xxHash, libpng): ship them beside it. DT_RPATH (not
# RUNPATH) so that it also applies to their own dependencies (libgfortran of OpenBLAS).
mkdir -p "$OUT/lib"
ldd "$OUT/$fuzzer" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
    grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$OUT/lib/"; done
patchelf --force-rpath --set-rpath '$ORIGIN/lib' "$OUT/$fuzzer"

# seed corpus, dictionary and options, named after the fuzzer
zip -j -q "$OUT/${fuzzer}_seed_corpus.zip" "$SRC"/attnfuzz/corpus/seeds/*
cp "$SRC/attnfuzz/fuzz/attnfuzz.dict" "$OUT/"
cp "$SRC/attnfuzz/fuzz/attnfuzz_harness.options" "$OUT/${fuzzer}.options"
