"""The target contract: what every stack module under attnfuzz/targets declares and how its
variants run as workers (docs/adding-a-target.md walks through a new one).

A stack module (any module of this package whose name does not start with "_") holds

    STACK = Stack("mystack", imports=("mylib",), pip=("mylib==1.2",), version_of="mylib",
                  variants=(Variant("fast", "mylib.attention, fused kernel"),
                            Variant("compiled", "mylib.compile of ...", compiled=True),
                            Variant("cuda", "... on a CUDA device", gpu=True)))

    class Target(_base.Target):
        STACK = STACK
        def declare(self): ...                 # caps, dtypes, conventions, limits
        def execute(self, art, req): ...       # one attnfuzz.request.Request -> output or Result
        # compiled stacks also: build(req) (timed as compile), structure(req) (the cache key)

    def repro_snippet(variant): ...            # standalone source for repro scripts

    if __name__ == "__main__":
        sys.exit(_base.main(STACK))

A variant runs as the stack module's Target unless its declaration names another class
(Variant(..., target="_mystack_serving.ServingTarget"): a module of this package and a
class in it, imported only when the variant runs); Stack.target(variant) makes it.

Declarations (Stack, Variant) are plain data, read without importing the stack: the
package lists them (`python -m attnfuzz.targets --declared`) for the CMake test loop, the
campaign and benchmark scripts and the set-up (which installs every stack's `pip` pins).
The Target base class holds what every stack shares: the hello fields' defaults, the
compiled-artifact cache keyed by structure with compile timing, the score budget, the
dropout keep-mask, the mapping of a stack's refusals to `unsupported`, and main().
"""

from __future__ import annotations

import collections
import importlib
import inspect
import sys
import time
import warnings

from attnfuzz import rng
from attnfuzz.case import KEY_FIELDS, SERVING_FORMS
from attnfuzz.layouts import ALL as ALL_LAYOUTS

# Every causal alignment (docs/design.md section 2): what a target implements unless it
# declares fewer.
CAUSAL_ALL = ("top_left", "bottom_right", "bottom_right_valid", "explicit")

# The conventions a target follows unless it declares otherwise: the reference's own.
DEFAULT_CONVENTIONS = {"causal": list(CAUSAL_ALL), "masked_rows": "zero", "dropout": "none",
                       "masked_values": "exclude", "masked_keys": "exclude", "denormals": "keep",
                       "scores": "f32"}

# The float32 scores [B, Hq, Sq, Sk] a target may materialize (explicit graphs, host
# masks, XLA's dot_product_attention): a case needing more is unsupported, not an OOM.
SCORE_BYTES_LIMIT = 1 << 30


class Variant:
    """One variant of a stack, as declared.

    name      the VARIANT of target:STACK/VARIANT
    summary   one line: what runs
    gpu       needs a CUDA device (never drawn, tested or smoke-run without one)
    compiled  compiles per structure (slow first case of a compile key): campaigns and
              benchmarks group these apart from eager kernels
    needs     modules this variant imports beyond the stack's own (e.g. torch for an
              exporter-built ONNX graph)
    quick     the self-test runs its quick case subset (compiles that take seconds)
    smoke     part of CI's few-second smoke campaign of its stack (False where one compile
              alone would not fit: the self-test covers those)
    backward  answers backward cases (gradients; the hello's cap "backward"): None takes
              the stack's `trains`
    serving   the serving forms it runs (docs/design.md section 2, "Serving forms"): any of
              "packed", "paged", "sinks", "alibi", caps of its hello; a campaign draws a
              share of serving cases for a variant with any (fuzz --serving)
    target    the class that runs it, "MODULE.CLASS" of a module of attnfuzz.targets
              (imported only when the variant runs); None: the stack module's Target
    """

    __slots__ = ("name", "summary", "gpu", "compiled", "needs", "quick", "smoke", "backward", "serving", "target")

    def __init__(self, name, summary, gpu=False, compiled=False, needs=(), quick=False, smoke=True, backward=None,
                 serving=(), target=None):
        self.name, self.summary = str(name), str(summary)
        self.gpu, self.compiled, self.quick, self.smoke = bool(gpu), bool(compiled), bool(quick), bool(smoke)
        self.needs = tuple(needs)
        self.backward = backward if backward is None else bool(backward)
        unknown = set(serving) - set(SERVING_FORMS)
        if unknown:
            raise ValueError("variant %s: unknown serving forms %s" % (name, ", ".join(sorted(unknown))))
        self.serving = tuple(f for f in SERVING_FORMS if f in serving)
        self.target = target

    def as_dict(self):
        return {"variant": self.name, "summary": self.summary, "gpu": self.gpu, "compiled": self.compiled,
                "needs": list(self.needs), "quick": self.quick, "smoke": self.smoke, "backward": self.backward,
                "serving": list(self.serving)}


class Stack:
    """A stack: its name (the STACK of target:STACK/VARIANT), the modules that must import
    for it to run, the pinned PyPI requirements the set-up installs for it, the module
    whose __version__ the hello reports (without one: the version of the first pinned wheel), its variants, and optionally probe(variant) ->
    None or the reason a variant cannot run here (a GPU missing, a compiler missing), called
    only after the imports succeeded. reference=True marks a second oracle (numpy_ref):
    tested and smoke-run, never part of a stack campaign. default: the variant a worker runs
    when none is named (None: one must be named). trains: its variants answer backward cases
    (the gradients; a variant may say otherwise); an inference stack (ONNX Runtime,
    OpenVINO, TVM, TensorRT) does not and is never sent one. gpu_pip: pinned PyPI requirements
    that only a CUDA machine can use (cuDNN's frontend, FlashInfer, FlashAttention-4): the
    wheel's extra of the stack carries them, the CPU set-up (scripts/setup_python.sh, which
    installs `pip`) does not."""

    __slots__ = ("name", "imports", "pip", "gpu_pip", "version_of", "variants", "probe", "reference", "default",
                 "trains")

    def __init__(self, name, imports, variants, pip=(), version_of=None, probe=None, reference=False,
                 default=None, trains=False, gpu_pip=()):
        self.name = str(name)
        self.imports = tuple(imports)
        self.pip = tuple(pip)
        self.gpu_pip = tuple(gpu_pip)
        self.version_of = version_of or (self.imports[0] if self.imports else None)
        self.variants = {v.name: v for v in variants}
        self.probe = probe
        self.reference = bool(reference)
        self.default = default
        self.trains = bool(trains)
        for v in self.variants.values():
            if v.backward is None:
                v.backward = self.trains

    def variant(self, name):
        """The Variant named name; KeyError (with the known names) for another."""
        try:
            return self.variants[name]
        except KeyError:
            raise KeyError("%s: unknown variant %r (known: %s)" % (self.name, name, ", ".join(self.variants))) from None

    def available(self, variant, extras=None):
        """(True, "") when the variant can run here, else (False, why). Imports the stack;
        never raises. extras: {top-level module: the wheel's extra that installs it}
        (attnfuzz.targets.extras_by_module), to name the extra when a module is missing."""
        if variant not in self.variants:
            return False, "unknown variant %r (known: %s)" % (variant, ", ".join(self.variants))
        for mod in self.imports + self.variants[variant].needs:
            try:
                importlib.import_module(mod)
            except BaseException as e:  # noqa: BLE001 - any import failure means unavailable
                if isinstance(e, KeyboardInterrupt):
                    raise
                extra = (extras or {}).get(mod.split(".")[0])
                hint = " (pip install 'attnfuzz[%s]')" % extra if extra and isinstance(e, ImportError) else ""
                return False, "%s does not import: %s%s" % (mod, describe(e), hint)
        if self.probe is not None:
            try:
                why = self.probe(variant)
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, KeyboardInterrupt):
                    raise
                why = "probe raised %s" % describe(e)
            if why:
                return False, str(why)
        return True, ""

    def backward(self, variant):
        """Does the variant answer backward cases?"""
        return self.variant(variant).backward

    def target_class(self, variant):
        """The class that runs a variant: its declaration's target ("MODULE.CLASS" under
        attnfuzz.targets), else Target of the stack's module (attnfuzz.targets.NAME).
        Imports the module."""
        where = self.variant(variant).target or "%s.Target" % self.name
        module, _, cls = where.rpartition(".")
        return getattr(importlib.import_module("attnfuzz.targets." + module), cls)

    def target(self, variant):
        """A variant's target, made: target_class(variant)(variant)."""
        return self.target_class(variant)(variant)

    def repro_snippet(self, variant):
        """The repro source of a variant: repro_snippet(variant) of the module holding the
        class that runs it (AttributeError where that module has none)."""
        return sys.modules[self.target_class(variant).__module__].repro_snippet(variant)

    def version(self):
        if not self.version_of:
            return "0"
        v = getattr(importlib.import_module(self.version_of), "__version__", None)
        if v is None and self.pip:   # no __version__ (tinygrad, iree): the first pinned wheel's version
            from importlib import metadata
            try:
                v = metadata.version(self.pip[0].split("==")[0])
            except metadata.PackageNotFoundError:
                pass
        return str(v or "0")

    def as_dict(self):
        return {"stack": self.name, "imports": list(self.imports), "pip": list(self.pip),
                "gpu_pip": list(self.gpu_pip),
                "reference": self.reference, "trains": self.trains,
                "variants": [v.as_dict() for v in self.variants.values()]}


def describe(e):
    """An exception as one line: "Type: first line of the message"."""
    msg = str(e).strip().splitlines()
    return "%s: %s" % (type(e).__name__, msg[0] if msg else "")


class LRU:
    """A small least-recently-used cache of compiled artifacts (modules, sessions, engines)."""

    def __init__(self, capacity=64):
        self.capacity = capacity
        self._d = collections.OrderedDict()

    def get(self, key):
        v = self._d.get(key)
        if v is not None:
            self._d.move_to_end(key)
        return v

    def put(self, key, value):
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.capacity:
            self._d.popitem(last=False)
        return value

    def values(self):
        return list(self._d.values())

    def clear(self):
        self._d.clear()

    def __len__(self):
        return len(self._d)


# The counter RNG's dropout keep mask of a case, bool [B, Hq, Sq, Sk] (docs/design.md section
# 2): None without dropout, all False for p >= 1. A request's keep holds it (req.keep).
keep_mask = rng.case_keep


def check_score_budget(case, limit=SCORE_BYTES_LIMIT):
    """Raises Unsupported when the float32 scores [B, Hq, Sq, Sk] would take more than limit
    bytes: the tensors fit the case budget, the scores need not."""
    n = 4 * case.batch * case.q_heads * case.q_len * case.kv_len
    if n > limit:
        from attnfuzz.worker import Unsupported
        raise Unsupported("the scores [B, Hq, Sq, Sk] would take %.1f GiB (limit %.1f GiB)"
                          % (n / 2.0 ** 30, limit / 2.0 ** 30))


def dense_structure(case, mask, bool_mask):
    """The structure a graph built from dense inputs depends on: the compile_key fields
    but the strides (inputs are made contiguous), plus the shapes and dtypes of the masks
    as sent and the gradients asked for (a backward graph is another graph)."""
    def shp(x):
        return None if x is None else (tuple(x.shape), str(x.dtype))
    return (case.key("shapes", "dtype", "causal", "scale", "softcap", "dropout"),
            tuple(sorted(case.layouts.items())), case.packed, shp(mask), shp(bool_mask), case.grads)


def _old_form_hooks(cls):
    """The hooks of cls written in the old positional form: refuse(case, mask, bool_mask),
    structure(case, mask, bool_mask), build(case, q, k, v, mask, bool_mask),
    execute(art, case, q, k, v, mask, bool_mask), told from the request form (refuse(req),
    structure(req), build(req), execute(art, req)) by their count of positional parameters
    without a default (self aside)."""
    old = _OLD_FORM.get(cls)
    if old is None:
        old = set()
        for name, n in (("refuse", 1), ("structure", 1), ("build", 1), ("execute", 2)):
            params = [p for p in inspect.signature(getattr(cls, name)).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
            if len(params) - 1 > n:      # self aside
                old.add(name)
        old = _OLD_FORM[cls] = frozenset(old)
    return old


_OLD_FORM = {}


class Target:
    """One variant of a stack as its worker runs it (the base of every stack's Target).

    Subclasses set STACK and implement declare() and execute(); those that compile per
    structure implement build() too, and may override structure(). run(req) is what the
    worker kit calls, with one attnfuzz.request.Request:

      1. a case needing a dtype or capability the hello does not declare is Unsupported
         (attnfuzz sends none; a direct caller may), then the score budget is checked and
         refuse(req) raises Unsupported for the cases the variant does not run though its
         caps allow them;
      2. structure(req) is the cache key (None: nothing is cached);
      3. build(req) makes the artifact for a new structure, timed as compile time for a
         compiled variant (with LAZY_COMPILE, the artifact's first execute is too: jit
         compiles on its first call);
      4. execute(artifact, req) runs one case and returns the output [B, Hq, Sq, Dv] or a
         worker.Result (another layout, a keep mask);
      5. an exception whose message refusal() recognizes (REFUSALS: substrings of the
         stack's own "this case is not supported" errors) becomes Unsupported with the
         stack's reason; any other is an error finding.

    A subclass written in the old positional form (execute(artifact, case, q, k, v, mask,
    bool_mask), refuse(case, mask, bool_mask), ...; told by each hook's count of
    parameters) keeps working: its hooks get the request's arguments, the case an
    attnfuzz.request.CaseView (qkv, dout, serving_tensors from the request).
    """

    STACK: Stack = None
    CACHE_SIZE = 64
    LAZY_COMPILE = False
    PLANS = False      # an eager kernel that builds a plan per structure on its first call
                       # (cuDNN): that call is timed as compiling, and compile_key defaults
                       # to every field, so that a batch shares one plan
    REFUSALS: tuple = ()
    SCORE_BUDGET = True
    BATCH = 64         # the most cases one run frame may hold (the hello's `batch`); the
                       # campaign sends batches only when asked (attnfuzz fuzz --batch)

    def __init__(self, variant):
        self.variant = variant
        self.decl = self.STACK.variant(variant)
        self.cache = LRU(self.CACHE_SIZE)
        self._hello = None

    # -- declarations ------------------------------------------------------------------
    def declare(self):
        """The variant's hello fields: a dict with "caps" (AF_CAP_* names; "backward" is
        added from the declaration, Variant.backward) and any of
        "dtypes" (default the float caps), "layouts" (default all eight), "limits",
        "conventions" (merged over DEFAULT_CONVENTIONS), "compile_key" (default every
        field for a compiled variant, none for an eager one), "lse_base" (2: the
        statistics of cap "lse" are base 2, as the stack's API documents),
        "deterministic" ({"forward": bool, "backward": bool}: a pass the stack documents
        as nondeterministic, e.g. a backward accumulating with atomics, false; default
        both true), "batch_invariant" (True where the stack promises it) and
        "compile_timeout" (seconds a first build may take where it is minutes: a JIT
        compiling with nvcc; attnfuzz's default --compile-timeout is raised to it)."""
        raise NotImplementedError

    def hello(self):
        """The complete hello fields (what serve() sends), computed once."""
        if self._hello is None:
            d = dict(self.declare())
            # "backward" and the serving forms come from the declaration (Variant.backward,
            # Variant.serving), never from declare()
            caps = ([c for c in d["caps"] if c != "backward" and c not in SERVING_FORMS]
                    + (["backward"] if self.decl.backward else []) + list(self.decl.serving))
            conv = dict(DEFAULT_CONVENTIONS)
            conv.update(d.get("conventions") or {})
            self._hello = {
                "caps": caps,
                "layouts": list(d.get("layouts") or ALL_LAYOUTS),
                "dtypes": list(d.get("dtypes") or [x for x in ("f32", "f16", "bf16") if x in caps]),
                "limits": dict(d.get("limits") or {}),
                "conventions": conv,
                "compile_key": list(d["compile_key"] if "compile_key" in d
                                    else (KEY_FIELDS if self.decl.compiled or self.PLANS else ())),
                "lse_base": d.get("lse_base") if "lse" in caps else None,
                "deterministic": d.get("deterministic"),
                "batch_invariant": bool(d.get("batch_invariant")),
                "compile_timeout": d.get("compile_timeout"),
            }
        return self._hello

    def libs(self):
        """The hello's "libs": the stack's version under its module's name ({"torch":
        "2.11.0"}), and what a stack adds of the libraries under it (cudnn, onednn, "sm" where
        a GPU runs it), strings each; known entries' `needs` read them (attnfuzz.known)."""
        name = self.STACK.version_of
        return {name: self.STACK.version()} if name else {}

    # -- one case ----------------------------------------------------------------------
    def refuse(self, req):
        """Raise worker.Unsupported for a case this variant does not run."""

    def structure(self, req):
        """The cache key of the artifact a case needs; None when nothing is built."""
        return dense_structure(req.case, req.mask, req.bool_mask) if self.decl.compiled or self.PLANS else None

    def build(self, req):
        """The artifact for a new structure (a compiled graph, a session, a module)."""
        return None

    def execute(self, artifact, req):
        raise NotImplementedError

    def _hooks(self, req):
        """(refuse, structure, build, execute) as functions of the request (and the
        artifact, for execute), the old-form ones given the request's arguments."""
        old = _old_form_hooks(type(self))
        if not old:
            return self.refuse, self.structure, self.build, self.execute
        from attnfuzz.request import old_form
        case, q, k, v, mask, bool_mask = old_form(req)
        return ((lambda r: self.refuse(case, mask, bool_mask)) if "refuse" in old else self.refuse,
                (lambda r: self.structure(case, mask, bool_mask)) if "structure" in old else self.structure,
                (lambda r: self.build(case, q, k, v, mask, bool_mask)) if "build" in old else self.build,
                (lambda a, r: self.execute(a, case, q, k, v, mask, bool_mask)) if "execute" in old else self.execute)

    def refusal(self, exc):
        """The unsupported reason when exc is the stack refusing the case, else None."""
        msg = str(exc)
        for pattern in self.REFUSALS:
            if pattern in msg:
                return "%s: %s" % (self.STACK.name, msg.strip().splitlines()[0][:300])
        return None

    def fatal(self, exc):
        """True when exc leaves the process unable to run another case (a CUDA context
        lost): main() then exits, attnfuzz records a crash and restarts the worker."""
        return False

    def run(self, req):
        from attnfuzz.worker import Result, Unsupported
        case = req.case
        h = self.hello()
        if case.dtype not in h["dtypes"]:
            raise Unsupported("dtype %s" % case.dtype)
        missing = case.required_caps() - set(h["caps"])
        if missing:       # attnfuzz sends no such case; a direct caller may
            raise Unsupported("%s/%s does not declare %s" % (self.STACK.name, self.variant, ", ".join(sorted(missing))))
        if self.SCORE_BUDGET:
            check_score_budget(case)
        refuse, structure, build, execute = self._hooks(req)
        refuse(req)
        key = structure(req)
        compile_s = 0.0
        try:
            art = self.cache.get(key) if key is not None else None
            fresh = art is None
            if fresh:
                t0 = time.perf_counter()
                art = build(req)
                compile_s = time.perf_counter() - t0
                if key is not None:
                    self.cache.put(key, art)
            t0 = time.perf_counter()
            res = execute(art, req)
            run_s = time.perf_counter() - t0
        except Unsupported:
            raise
        except Exception as e:  # noqa: BLE001 - a refusal becomes unsupported, the rest propagates
            why = self.refusal(e)
            if why:
                raise Unsupported(why) from None
            raise
        if not isinstance(res, Result):
            res = Result(res)
        if not self.decl.compiled and not self.PLANS:   # an eager module's construction is no compile
            compile_s, run_s = 0.0, run_s + compile_s
        elif fresh and (self.LAZY_COMPILE or self.PLANS):  # the first call compiles (jit) or plans
            compile_s, run_s = compile_s + run_s, 0.0
        res.compile_s = compile_s
        res.run_s = run_s
        return res

    def run_batch(self, requests):
        """Runs the cases of a batch frame (requests, one compile key): a Result or the
        exception raised, per case, in order, one by one. It stops at
        an exception that is fatal (the process can run no other case): that case's answer is
        a worker.Fault, the last; serve() answers the rest not_run and ends the worker, so
        that attnfuzz charges the crash to that case alone and sends the rest to another."""
        from attnfuzz.worker import Fault
        out = []
        for req in requests:
            try:
                out.append(self.run(req))
            except Exception as e:  # noqa: BLE001 - the case's own status
                if self.fatal(e):
                    report_fault(e)
                    out.append(Fault(e))
                    break
                out.append(e)
        return out


def report_fault(e):
    """A fault the process cannot go on from: its traceback on stderr, which attnfuzz keeps
    in the crash's bundle."""
    import traceback
    traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    sys.stderr.flush()


def fault_exit():
    """Ends the worker after a fault without answering the frame in hand (a batch whose
    faulting case is not known: attnfuzz runs its cases again one by one)."""
    import os
    from attnfuzz.worker import FAULT_EXIT
    sys.stderr.flush()
    os._exit(FAULT_EXIT)


def _quiet_warnings():
    """The stacks' warnings about inputs we send on purpose (non-writable numpy views,
    kernels declining, deprecations) would fill every bundle's stderr tail."""
    for category in (UserWarning, DeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category)


def main(stack, target_cls=None, argv=None):
    """`python -m attnfuzz.targets.STACK [VARIANT]`: serves one variant (the stack's default
    when none is named) as a worker, run by target_cls or else the class its declaration
    names (Stack.target_class). Exit 2 for an unknown variant (or none), 3 when it cannot
    run here (the reason on stderr), 0 after bye."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv and stack.default:
        argv = [stack.default]
    if len(argv) != 1 or argv[0] not in stack.variants:
        sys.stderr.write("usage: python -m attnfuzz.targets.%s VARIANT; unknown variant %r (known: %s)\n"
                         % (stack.name, argv[0] if argv else "(none)", ", ".join(stack.variants)))
        return 2
    variant = argv[0]
    ok, why = stack.available(variant)
    if not ok:
        sys.stderr.write("attnfuzz.targets.%s: %s is unavailable: %s\n" % (stack.name, variant, why))
        return 3
    _quiet_warnings()
    from attnfuzz.worker import serve
    target = target_cls(variant) if target_cls is not None else stack.target(variant)
    h = target.hello()

    def run(req):
        try:
            return target.run(req)
        except Exception as e:  # noqa: BLE001
            if target.fatal(e):
                # the process cannot run another case (a CUDA context lost): exit, so
                # attnfuzz records this case as a crash and starts a fresh worker
                report_fault(e)
                fault_exit()
            raise

    def go():
        return serve(run, name=stack.name, version=stack.version(), variant=variant, caps=h["caps"],
                     layouts=h["layouts"], dtypes=h["dtypes"], limits=h["limits"] or None,
                     conventions=h["conventions"], compile_key=h["compile_key"],
                     batch=target.BATCH, run_batch=target.run_batch if target.BATCH > 1 else None,
                     libs=target.libs(), lse_base=h["lse_base"], deterministic=h["deterministic"],
                     batch_invariant=h["batch_invariant"], compile_timeout=h["compile_timeout"])

    return _profiled(go, "%s-%s" % (stack.name, variant))


def _profiled(fn, name):
    """fn() under cProfile when $ATTNFUZZ_PROFILE names a directory: the worker's profile
    is written there as NAME-PID.prof when it ends normally (after bye; a worker that
    crashes writes none). Read with `python -m pstats FILE` or scripts/profile_workers.py."""
    import os
    where = os.environ.get("ATTNFUZZ_PROFILE", "")
    if not where:
        return fn()
    import cProfile
    prof = cProfile.Profile()
    try:
        return prof.runcall(fn)
    finally:
        os.makedirs(where, exist_ok=True)
        prof.dump_stats(os.path.join(where, "%s-%d.prof" % (name.replace("/", "_"), os.getpid())))
