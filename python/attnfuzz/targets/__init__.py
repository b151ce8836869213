"""Real targets: one worker module per stack, each runnable as
`python -m attnfuzz.targets.STACK VARIANT` (docs/worker-protocol.md), each following the
contract of attnfuzz.targets._base (docs/adding-a-target.md).

The stacks are discovered, never listed by hand: every module of this package whose name
does not start with "_" is a stack and declares STACK (a _base.Stack). Everything that
needs the list of stacks and variants reads it from here, through the command line of
__main__.py: the CMake test loop, scripts/campaign.sh, bench_targets.sh, gpu_campaign.sh,
tests/findings_repros.py and the set-up's requirements.

declared() imports the stack modules only (they import their stack lazily), so it is fast
and works where no stack is installed; list_targets() also asks each variant whether it
can run here, which imports the stacks. Neither raises for a broken module: it is listed
with the reason."""

import contextlib
import importlib
import pkgutil
import sys

from attnfuzz.targets._base import describe


def stack_names():
    """The stack modules of this package, sorted (helpers start with "_")."""
    names = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    return sorted(names)


def load(stack):
    """(module, None) or (None, reason) for a stack module."""
    try:
        mod = importlib.import_module("attnfuzz.targets." + stack)
        if not hasattr(mod, "STACK"):
            return None, "module attnfuzz.targets.%s declares no STACK" % stack
        return mod, None
    except BaseException as e:  # noqa: BLE001 - a broken module is listed, never fatal
        if isinstance(e, KeyboardInterrupt):
            raise
        return None, "module attnfuzz.targets.%s: %s" % (stack, describe(e))


def declared(stacks=None):
    """[Stack.as_dict() | {"stack": name, "error": reason}, ...] for every stack module."""
    out = []
    for name in stacks or stack_names():
        mod, why = load(name)
        out.append(mod.STACK.as_dict() if mod else {"stack": name, "error": why})
    return out


def list_targets(stacks=None):
    """[{"target": "STACK/VARIANT", "available": bool, "reason": str, "summary": str,
    "gpu": bool, "compiled": bool, "smoke": bool, "reference": bool, "backward": bool}, ...].
    What the stacks print while importing goes to stderr."""
    with contextlib.redirect_stdout(sys.stderr):
        return _list(stacks or stack_names())


def extras_by_module(mods):
    """{top-level module: stack} for the modules each stack imports, among the stack modules
    mods that declare pip pins (CPU or GPU ones): the stack's name is the wheel's extra that
    installs them (python/wheel_metadata.py), e.g. torch -> "torch", onnxruntime -> "ort",
    cudnn -> "cudnn"."""
    out = {}
    mods = [m for m in mods if m is not None]
    # the CPU stacks first: a module a GPU stack imports beside its own (torch for
    # cudnn's tensors) is named by the stack that installs it
    for gpu in (False, True):
        for mod in mods:
            if mod.STACK.gpu_pip if gpu else mod.STACK.pip:
                for name in mod.STACK.imports:
                    out.setdefault(name.split(".")[0], mod.STACK.name)
    return out


def _list(stacks):
    rows = []
    extras = extras_by_module(load(stack)[0] for stack in stack_names())
    for stack in stacks:
        mod, why = load(stack)
        if mod is None:
            rows.append({"target": stack, "available": False, "reason": why, "summary": "", "gpu": False,
                         "compiled": False, "smoke": False, "reference": False, "backward": False, "serving": []})
            continue
        st = mod.STACK
        for v in st.variants.values():
            ok, reason = st.available(v.name, extras)
            rows.append({"target": "%s/%s" % (st.name, v.name), "available": ok, "reason": reason,
                         "summary": v.summary, "gpu": v.gpu, "compiled": v.compiled, "smoke": v.smoke,
                         "reference": st.reference, "backward": st.backward(v.name), "serving": list(v.serving)})
    return rows


def select(rows, where):
    """The rows (list_targets or flattened declared()) that match every word of where:
    cpu, gpu, eager, compiled, smoke, available, campaign (not a reference), backward (answers
    backward cases), serving (runs a serving form), or a stack name or STACK/VARIANT (several
    names: any of them)."""
    words = set(where)
    names = {w for w in words
             if w not in ("cpu", "gpu", "eager", "compiled", "smoke", "available", "campaign", "backward",
                          "serving")}

    def ok(r):
        stack = r["target"].split("/", 1)[0]
        return (("cpu" not in words or not r["gpu"]) and ("gpu" not in words or r["gpu"])
                and ("eager" not in words or not r["compiled"]) and ("compiled" not in words or r["compiled"])
                and ("smoke" not in words or r.get("smoke", True))
                and ("available" not in words or r.get("available", True))
                and ("campaign" not in words or not r["reference"])
                and ("backward" not in words or r.get("backward"))
                and ("serving" not in words or r.get("serving"))
                and (not names or stack in names or r["target"] in names))
    return [r for r in rows if ok(r)]


def campaigns(rows):
    """The campaigns the scripts run over rows (select()'s): [(name, [STACK/VARIANT, ...])],
    a stack's variants together as one campaign named STACK, split into STACK-eager and
    STACK-compiled where the stack has both: every case of a campaign runs through all its
    variants, and eager kernels would wait on the compilers (torch's CPU variants: 118 and
    173 cases/s split, 59 together)."""
    out = []
    for stack in sorted({r["target"].split("/", 1)[0] for r in rows}):
        mine = [r for r in rows if r["target"].split("/", 1)[0] == stack]
        groups = [("eager", [r for r in mine if not r["compiled"]]), ("compiled", [r for r in mine if r["compiled"]])]
        if all(g for _, g in groups):
            out += [("%s-%s" % (stack, kind), [r["target"] for r in g]) for kind, g in groups]
        else:
            out.append((stack, [r["target"] for r in mine]))
    return out


def declared_rows(stacks=None):
    """declared() flattened to list_targets()'s rows, without asking availability."""
    rows = []
    for st in declared(stacks):
        for v in st.get("variants", ()):
            rows.append({"target": "%s/%s" % (st["stack"], v["variant"]), "summary": v["summary"], "gpu": v["gpu"],
                         "compiled": v["compiled"], "reference": st["reference"], "quick": v["quick"],
                         "smoke": v["smoke"], "backward": v["backward"], "serving": v.get("serving", [])})
    return rows


def requirements(base, *more):
    """The pinned requirements: base's lines (a requirements file's path), then every
    stack's pip pins, then the lines of the files in more (the capture extra's), each once,
    in order (not the GPU-only gpu_pip pins: the CPU set-up installs these)."""
    lines, seen = [], set()
    with open(base) as f:
        extra = [ln.strip() for ln in f]
    for st in declared():
        extra += st.get("pip", [])
    for path in more:
        with open(path) as f:
            extra += [ln.strip() for ln in f]
    for ln in extra:
        if ln and not ln.startswith("#") and ln not in seen:
            seen.add(ln)
            lines.append(ln)
    return lines

