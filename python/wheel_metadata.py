"""The wheel's requirements, computed at build time from the project's own declarations
(a [[tool.dynamic-metadata]] provider of scikit-build-core, named in pyproject.toml), so
that no pin is written twice:

  dependencies            the worker kit's requirements (python/requirements.txt), by
                          name only: the wheel goes into environments that already hold
                          numpy and ml_dtypes (a torch or jax container), whose versions it
                          must not move; the set-up's exact pins stay in that file
  optional-dependencies   one extra per stack that declares pip pins, exactly as the
                          stack declares them and the set-up installs them
                          (`STACK = Stack(..., pip=...)`: attnfuzz[torch], [jax], [ort],
                          [openvino], [tvm]), and [all] with every one of them; the GPU
                          stacks' extras (`gpu_pip`: attnfuzz[cudnn], [flashinfer], [fa4]),
                          which the CPU set-up never installs and [all] leaves out;
                          and [capture]: the model libraries of `attnfuzz capture`'s
                          examples and tests (python/requirements-capture.txt)

The declarations are read the way every script reads them, through `python -m
attnfuzz.targets --declared` with python/ on PYTHONPATH; that imports numpy and ml_dtypes,
so the build environment gets the kit's pinned requirements
(get_requires_for_dynamic_metadata). tests/wheel_test.sh checks the built wheel's
metadata against the same declarations."""

import json
import os
import re
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_REQUIREMENTS = os.path.join(_HERE, "requirements.txt")
_CAPTURE = os.path.join(_HERE, "requirements-capture.txt")
# A requirement's name: what precedes its version specifier or environment marker (PEP 508).
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _lines(path):
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]


def kit_requirements():
    """python/requirements.txt's pinned lines (numpy==..., ml_dtypes==..., zstandard==...)."""
    return _lines(_REQUIREMENTS)


def stack_extras():
    """{stack: [pin, ...]} for every stack that declares pip pins, plus "all": all of them
    in order, each once, and "capture": python/requirements-capture.txt's pins. Raises
    when a stack's declaration does not read."""
    env = dict(os.environ, PYTHONPATH=_HERE, PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, "-m", "attnfuzz.targets", "--declared"], env=env, check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    extras, every = {}, []
    for st in json.loads(out):
        if "error" in st:
            raise RuntimeError("the declaration of stack %s does not read: %s" % (st["stack"], st["error"]))
        if st["pip"]:
            extras[st["stack"]] = list(st["pip"])
            every += [p for p in st["pip"] if p not in every]
        elif st.get("gpu_pip"):
            extras[st["stack"]] = list(st["gpu_pip"])
    extras["all"] = every
    extras["capture"] = _lines(_CAPTURE)
    return extras


def get_requires_for_dynamic_metadata(settings=None):
    return kit_requirements()


def dynamic_metadata(settings, project):
    deps = []
    for ln in kit_requirements():
        m = _NAME.match(ln)
        if not m:
            raise ValueError("%s: cannot read a package name from %r" % (_REQUIREMENTS, ln))
        deps.append(m.group(1))
    return {"dependencies": deps, "optional-dependencies": stack_extras()}
