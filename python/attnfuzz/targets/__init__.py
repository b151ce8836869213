"""Real targets: one worker module per stack, each runnable as
`python -m attnfuzz.targets.STACK VARIANT` (docs/worker-protocol.md).

Each module has VARIANTS (variant -> one-line summary), available(variant) -> (bool,
reason) that imports its stack lazily and never raises, main(argv) and
repro_snippet(variant). list_targets() (and `python -m attnfuzz.targets --list`) reports
every variant of every known stack; a module that is missing or fails to import is listed
as unavailable with the reason, never an exception."""

import contextlib
import importlib
import sys

STACKS = ("numpy_ref", "torch", "ort", "openvino", "tvm", "jax", "tensorrt")


def _reason(e):
    msg = str(e).strip().splitlines()
    return "%s: %s" % (type(e).__name__, msg[0] if msg else "")


def list_targets(stacks=STACKS):
    """[{"target": "STACK/VARIANT", "available": bool, "reason": str, "summary": str}, ...]
    What the stacks print while importing goes to stderr."""
    with contextlib.redirect_stdout(sys.stderr):
        return _list(stacks)


def _list(stacks):
    rows = []
    for stack in stacks:
        try:
            mod = importlib.import_module("attnfuzz.targets." + stack)
            variants = dict(getattr(mod, "VARIANTS"))
        except BaseException as e:  # noqa: BLE001 - a broken module is listed, never fatal
            if isinstance(e, KeyboardInterrupt):
                raise
            rows.append({"target": stack, "available": False,
                         "reason": "module attnfuzz.targets.%s: %s" % (stack, _reason(e)), "summary": ""})
            continue
        for variant, summary in variants.items():
            try:
                ok, reason = mod.available(variant)
                ok, reason = bool(ok), str(reason or "")
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, KeyboardInterrupt):
                    raise
                ok, reason = False, "available() raised %s" % _reason(e)
            rows.append({"target": "%s/%s" % (stack, variant), "available": ok, "reason": reason,
                         "summary": str(summary)})
    return rows
