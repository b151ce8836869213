#!/usr/bin/env bash
# The wheel end to end (ctest `wheel`, label "wheel"): `pip install attnfuzz-*.whl` must give
# a working `attnfuzz` in an environment that has never seen the checkout.
#   1. a clean clone of SRC's HEAD (uncommitted changes are not tested) builds the sdist,
#      the wheel from it and the manylinux repair (scripts/build_wheel.sh);
#   2. the wheel holds the binary and the libraries it needs, and its metadata agrees with
#      the stacks' declarations (one extra per stack, pinned exactly as declared);
#   3. a fresh virtual environment gets the wheel and what it requires from PyPI (numpy,
#      ml_dtypes, zstandard), nothing else;
#   4. from a directory outside any checkout, with no PYTHONPATH and no ATTNFUZZ_PYTHON:
#      `attnfuzz` is on the environment's PATH, `fuzz --time 5` is clean, `replay` of a
#      corpus bundle still finds its bug, a worker campaign of target:numpy_ref/float64 runs
#      with the environment's Python, `backends` names that Python and the extra a missing
#      stack needs, `known` lists the repository's known bugs from the package, and the
#      bundle loader reads a bundle, the pytest plugin is a pytest11 entry point; `backends` run inside the clone
#      still uses the environment, not the checkout.
# Exit 77 (skipped) when SRC is not a git checkout or PyPI cannot be reached.
#   tests/wheel_test.sh SRC WORKDIR
set -euo pipefail
src=$1 work=$2
t0=$SECONDS
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
step() { echo "== $* ($((SECONDS - t0)) s)"; }

git -C "$src" rev-parse --verify -q HEAD >/dev/null 2>&1 || { echo "skipped: $src is not a git checkout"; exit 77; }
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
rm -rf "$work"
mkdir -p "$work/away"

pypi_or_skip() { # a failed step: skipped (77) when PyPI cannot be reached, where the build
  # environment, the packaging tools and the wheel's requirements come from
  "$py" -m venv "$work/probe"
  if ! "$work/probe/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$work/probe/dl" \
      scikit-build-core==1.1.2 >"$work/probe.log" 2>&1; then
    tail -n 3 "$work/probe.log"
    echo "skipped: PyPI cannot be reached"
    exit 77
  fi
}

step "clone $(git -C "$src" rev-parse --short HEAD) and build"
git clone -q "$src" "$work/src"
"$work/src/scripts/build_wheel.sh" --out "$work/dist" --jobs 2 >"$work/build.log" 2>&1 \
  || { tail -n 40 "$work/build.log"; pypi_or_skip; echo "FAIL scripts/build_wheel.sh"; exit 1; }
whl=$(ls "$work"/dist/attnfuzz-*.whl)
sed -n '/is consistent with/,/^build_wheel:/p' "$work/build.log"
case $(basename "$whl") in
  attnfuzz-*-py3-none-manylinux_2_*_x86_64.whl) ok "a py3-none manylinux wheel: $(basename "$whl")" ;;
  *) bad "the wheel's tags: $(basename "$whl")" ;;
esac
ls "$work"/dist/attnfuzz-*.tar.gz >/dev/null 2>&1 && ok "the sdist beside it" || bad "no sdist in $work/dist"

step "a fresh environment"
"$py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$whl" >"$work/install.log" 2>&1 \
  || { tail -n 20 "$work/install.log"; pypi_or_skip; echo "FAIL pip install $whl"; exit 1; }
vpy=$work/venv/bin/python
site=$("$vpy" -c 'import attnfuzz, os; print(os.path.dirname(os.path.dirname(attnfuzz.__file__)))')
installed=$("$vpy" -m pip list --format=freeze --disable-pip-version-check | cut -d= -f1 | tr A-Z_ a-z- |
  grep -vxE "pip|setuptools|wheel" | sort | tr '\n' ' ')
[ "$installed" = "attnfuzz ml-dtypes numpy zstandard " ] \
  && ok "the environment holds the wheel and what it requires, nothing else: $installed" || bad "installed: $installed"

# what ldd resolves: every library, the vendored ones from attnfuzz.libs
lddout=$(ldd "$site/attnfuzz/bin/attnfuzz")
if echo "$lddout" | grep -q "not found"; then bad "ldd: $(echo "$lddout" | grep "not found")"; else ok "ldd resolves every library"; fi
for lib in libopenblas libgfortran libcjson libxxhash libzstd libpng16; do
  path=$(echo "$lddout" | awk -v l="$lib" 'index($1, l) == 1 {print $3}')
  case $(realpath -q "${path:-/nonexistent}") in
    "$(realpath "$site")/attnfuzz.libs/"*) ok "$lib comes from attnfuzz.libs" ;;
    *) bad "$lib does not come from $site/attnfuzz.libs: ${path:-absent}" ;;
  esac
done

# the metadata against the declarations, read from the installed package
AF_CAPTURE_REQ="$work/src/python/requirements-capture.txt" "$vpy" - <<'EOF' && ok "Requires-Dist and the extras agree with python/requirements.txt, the stacks' pip pins and the capture extra's" || bad "metadata"
import importlib.metadata as md, json, re, subprocess, sys
meta = md.metadata("attnfuzz")
base, extras = [], {}
for req in md.requires("attnfuzz"):
    m = re.match(r'^(.*?);\s*extra\s*==\s*"([^"]+)"$', req)
    if m:
        extras.setdefault(m.group(2), []).append(m.group(1).strip())
    else:
        base.append(req.strip())
decl = json.loads(subprocess.run([sys.executable, "-m", "attnfuzz.targets", "--declared"], check=True,
                                 stdout=subprocess.PIPE).stdout)
want = {st["stack"]: st["pip"] or st["gpu_pip"] for st in decl if st["pip"] or st["gpu_pip"]}
# every CPU stack's pins in order, each once (IREE and ORT both pin onnx)
want["all"] = list(dict.fromkeys(p for st in decl for p in st["pip"]))
import os
with open(os.environ["AF_CAPTURE_REQ"]) as f:  # attnfuzz[capture]: transformers, diffusers
    want["capture"] = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
for name in ("torch", "jax", "ort", "openvino", "tvm"):
    assert name in want, "stack %s declares no pins" % name
assert extras == want, "extras %s, declared %s" % (extras, want)
assert sorted(meta.get_all("Provides-Extra")) == sorted(want), meta.get_all("Provides-Extra")
assert base == ["numpy", "ml_dtypes", "zstandard"], base
EOF

step "attnfuzz from outside the checkout"
cp -r "$work/src/corpus/regress/diverge-5868ff954b2aa973" "$work/away/bundle"
run() { # the environment's bin/ on PATH, nothing of the checkout, in $work/away
  (cd "$work/away" && env -u PYTHONPATH -u ATTNFUZZ_PYTHON -u VIRTUAL_ENV PATH="$work/venv/bin:/usr/bin:/bin" "$@")
}
rc_of() { local rc=0; run "$@" >"$work/out" 2>&1 || rc=$?; echo $rc; }
[ "$(run sh -c 'command -v attnfuzz')" = "$work/venv/bin/attnfuzz" ] && ok "attnfuzz is the environment's command" \
  || bad "command -v attnfuzz: $(run sh -c 'command -v attnfuzz' || true)"
rc=$(rc_of attnfuzz --help); [ "$rc" = 0 ] && ok "attnfuzz --help" || { bad "attnfuzz --help: exit $rc"; cat "$work/out"; }
rc=$(rc_of attnfuzz fuzz --time 5 --crashes crashes --stats fuzz.json --quiet)
[ "$rc" = 0 ] && ok "fuzz --time 5: clean" || { bad "fuzz --time 5: exit $rc"; tail -n 5 "$work/out"; }
rc=$(rc_of attnfuzz replay -q bundle)
[ "$rc" = 1 ] && ok "replay of corpus/regress/diverge-5868ff954b2aa973 still finds its bug (exit 1)" \
  || { bad "replay: exit $rc (want 1)"; tail -n 5 "$work/out"; }
rc=$(rc_of attnfuzz replay -q --backend fused bundle)
[ "$rc" = 0 ] && ok "replay --backend fused: clean" || { bad "replay --backend fused: exit $rc"; tail -n 5 "$work/out"; }
rc=$(rc_of attnfuzz fuzz --backend target:numpy_ref/float64 --runs 300 --crashes wcrashes --stats worker.json --quiet)
[ "$rc" = 0 ] && ok "worker campaign of target:numpy_ref/float64: clean" \
  || { bad "worker campaign: exit $rc"; tail -n 5 "$work/out"; }
"$vpy" - "$work/away" <<'EOF' && ok "the campaigns ran (stats: execs, no errors)" || bad "campaign stats"
import json, os, sys
fuzz = json.load(open(os.path.join(sys.argv[1], "fuzz.json")))
worker = json.load(open(os.path.join(sys.argv[1], "worker.json")))
assert fuzz["execs"] > 100, fuzz["execs"]
assert worker["execs"] == 300, worker["execs"]
assert not any(worker["findings_per_kind"].values()), worker["findings_per_kind"]
EOF
rc=$(rc_of attnfuzz backends)
if [ "$rc" = 0 ] && grep -q "^real targets (target:STACK/VARIANT, run by $work/venv/bin/python" "$work/out" \
   && grep -Eq "^  target:numpy_ref/float64 +fwd\+bwd" "$work/out"; then
  ok "backends: the environment's Python runs the targets; numpy_ref is available"
else
  bad "backends (exit $rc)"; sed -n '/^real targets/,+4p' "$work/out"
fi
grep -q "target:torch/sdpa_math *unavailable: torch does not import: .*(pip install 'attnfuzz\[torch\]')" "$work/out" \
  && ok "backends says what the environment lacks: torch, and the extra that installs it" \
  || { bad "backends on torch"; grep "target:torch/sdpa_math" "$work/out" || true; }
rc=0; (cd "$work/src" && env -u PYTHONPATH -u ATTNFUZZ_PYTHON PATH="$work/venv/bin:/usr/bin:/bin" attnfuzz backends) \
  >"$work/out" 2>&1 || rc=$?
[ "$rc" = 0 ] && grep -q "run by $work/venv/bin/python" "$work/out" \
  && ok "inside a checkout the installed attnfuzz still uses its environment" \
  || { bad "backends inside the clone (exit $rc)"; grep "^real targets" "$work/out" || true; }
rc=$(rc_of attnfuzz known)
n_installed=$(grep -c "($site/attnfuzz/corpus/findings/[a-z0-9_-]*/known.json)\$" "$work/out" || true)
n_repo=$("$vpy" -c 'import glob, json, sys
print(sum(len(json.load(open(f))["entries"]) for f in glob.glob(sys.argv[1] + "/corpus/findings/*/known.json")))' "$work/src")
[ "$rc" = 0 ] && [ "$n_installed" = "$n_repo" ] && [ "$n_repo" -gt 0 ] \
  && ok "known: the repository's $n_repo known bugs, from the package's corpus/findings/*/known.json" \
  || { bad "known (exit $rc): $n_installed of the repository's $n_repo entries from $site/attnfuzz"; head -n 3 "$work/out"; }
rc=$(rc_of python -c 'import sys, attnfuzz.bundle as b; x = b.load("bundle"); print(x["case"]["q_len"], sorted(x)[:3])')
[ "$rc" = 0 ] && ok "the bundle loader: $(cat "$work/out")" || { bad "bundle loader: exit $rc"; cat "$work/out"; }
rc=$(rc_of python -c 'from importlib.metadata import entry_points
print([e.value for e in entry_points(group="pytest11") if e.name == "attnfuzz.pytest_plugin"])')
[ "$rc" = 0 ] && grep -q "\['attnfuzz.pytest_plugin'\]" "$work/out" \
  && ok "the pytest plugin is a pytest11 entry point (pytest loads it where the wheel is installed)" \
  || { bad "pytest11 entry point (exit $rc)"; cat "$work/out"; }

step "done"
echo "$fails failed; wheel $(du -k "$whl" | cut -f1) KiB"
[ "$fails" = 0 ]
