#!/usr/bin/env bash
# The project's Python environment, .venv/, on Debian's python3, with pinned versions: the
# kit's own (python/requirements.txt: numpy, ml_dtypes, zstandard) and those every real
# target's stack declares (`pip` in python/attnfuzz/targets/STACK.py: torch, onnx,
# onnxruntime, openvino, apache-tvm, jax, tinygrad, iree-base-compiler and -runtime) and
# the capture extra's (python/requirements-capture.txt: transformers, diffusers, for the
# tiny models `attnfuzz capture` is tested on), as `python -m attnfuzz.targets
# --requirements` lists them. The GPU-only stacks' pins
# (`gpu_pip`: cuDNN's frontend, FlashInfer, FlashAttention-4) are not installed: the wheel's
# extras carry them.
#
# Installed once, reused: the environment is built in a cache directory named for the
# requirements' hash ($ATTNFUZZ_CACHE, default ~/.cache/attnfuzz/venv-<hash>) and .venv
# links to it, so every clone on the machine (CI's fresh ones included) shares it. The
# first install downloads about 3 GB (PyPI's torch wheel pulls its CUDA dependency wheels
# even for CPU use) and takes about 2 minutes on a fast link; later runs take a second.
# A .venv that is a real directory (made by hand) is kept and brought up to date.
#   scripts/setup_python.sh          create or reuse
set -euo pipefail
cd "$(dirname "$0")/.."

py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
req=$(mktemp)
trap 'rm -f "$req"' EXIT
PYTHONPATH=python "$py" -m attnfuzz.targets --requirements python/requirements.txt python/requirements-capture.txt >"$req" \
    || { echo "setup_python: the stacks' declarations do not read (python -m attnfuzz.targets --requirements)" >&2; exit 2; }
hash=$( (cat "$req"; "$py" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-12)
marker=.attnfuzz-requirements-$hash

install_into() { # DIR
    local dir=$1 t0=$SECONDS
    echo "setup_python: installing $(wc -l <"$req") pinned packages into $dir (first time: about 3 GB)"
    [ -x "$dir/bin/python" ] || "$py" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    touch "$dir/$marker"
    echo "setup_python: done in $((SECONDS - t0)) s"
}

if [ -d .venv ] && [ ! -L .venv ]; then
    [ -f ".venv/$marker" ] || install_into .venv
else
    cache=${ATTNFUZZ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/attnfuzz}
    dir=$cache/venv-$hash
    mkdir -p "$cache"
    if [ ! -f "$dir/$marker" ]; then
        # one installer at a time per cache (two clones set up at once)
        exec 9>"$cache/.lock-$hash"
        flock 9
        [ -f "$dir/$marker" ] || install_into "$dir"
    fi
    ln -sfn "$dir" .venv
fi
# The tests' own tools (python/requirements-test.txt: pytest, polygraphy), into the same
# environment with a marker of their own, under the same lock.
test_req=python/requirements-test.txt
test_marker=.attnfuzz-test-requirements-$(sha256sum <"$test_req" | cut -c1-12)
if [ ! -f ".venv/$test_marker" ]; then
    exec 8>"$(readlink -f .venv)/.lock-test"
    flock 8
    if [ ! -f ".venv/$test_marker" ]; then
        .venv/bin/python -m pip install -q --disable-pip-version-check -r "$test_req"
        touch ".venv/$test_marker"
    fi
fi
# the attnfuzz package itself is not installed: everything that runs it sets
# PYTHONPATH=python (the C side does so for target: backends), so the shared environment
# never points at one clone.
.venv/bin/python -c 'import numpy, ml_dtypes, zstandard' \
    || { echo "setup_python: .venv is broken; remove it and run again" >&2; exit 2; }
