"""PyTorch attention as users build it: small nn.Modules fed Q, K, V in the case's PHYSICAL
layout, so the layout handling (transposes, the bsd head split, the UNet
`qkv.reshape(b, 3*c, -1).chunk(3, dim=1)`, the MHAv2 per-head interleave) is part of what
the eager kernels or the compiler see.

Variants (`python -m attnfuzz.targets.torch VARIANT`, `--backend target:torch/VARIANT`):

CPU (always available where torch imports):
  sdpa_math     F.scaled_dot_product_attention under sdpa_kernel(MATH)
  sdpa_flash    the same under sdpa_kernel(FLASH_ATTENTION): the CPU flash kernel (needs D == Dv)
  sdpa_flash_lse  the CPU flash kernel's op called directly
                (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu, the one SDPA
                dispatches sdpa_flash to), returning its logsumexp too (cap lse; float32
                [B, Hq, Sq], natural log); forward only
  explicit      eager module: matmul, scale at the case's placement, softcap, masks, softmax,
                dropout with the counter RNG's keep mask as an input, matmul
  compile       torch.compile (Inductor) of the explicit module
  compile_sdpa  torch.compile of the SDPA module (Inductor picks the kernel)
  flex          FlexAttention, compiled; causal / window / key padding and the boolean mask as
                a mask_mod (a block mask), softcap and the additive mask as a score_mod

CUDA (the same modules on device cuda; declared unavailable where torch sees no GPU):
  cuda_sdpa_math, cuda_sdpa_flash, cuda_sdpa_efficient, cuda_sdpa_cudnn, cuda_explicit,
  cuda_compile, cuda_compile_sdpa, cuda_flex
  cuda_sdpa_flash_lse, cuda_sdpa_efficient_lse, cuda_sdpa_cudnn_lse
                the CUDA kernels' ops called directly (_scaled_dot_product_flash_attention,
                _efficient_attention, _cudnn_attention), returning their logsumexp too (cap
                lse; natural log); forward only; the flash op without masks (is_causal only)

Serving paths (docs/design.md section 2, "Serving forms"; attnfuzz.targets._torch_serving):
  sdpa_jagged, cuda_sdpa_jagged   SDPA on nested jagged tensors (THD + offsets)
  flex_paged, cuda_flex_paged     FlexAttention over a page cache (PagedAttention), ALiBi as a
                                  score_mod, a sink through the log-sum-exp (CUDA)
  cuda_flex_decode                the same with at most 16 queries: the flex decode kernel
  cuda_varlen                     torch.nn.attention.varlen.varlen_attn (FlashAttention varlen)

Masks: SDPA's is_causal is top-left; the modules use it for a plain top-left causal case and
otherwise build an explicit boolean mask (causal on any diagonal, key padding, window) and
combine it with the case's masks the way user code does (`torch.where(mask, add, -inf)`),
so every diagonal is supported. An additive mask goes to SDPA in its own dtype when SDPA takes it (float32
or Q's dtype: an f32 mask with f16/bf16 Q goes as is), else cast to float32 (exact); the
explicit module casts it to the score dtype.

Conventions, measured on torch 2.15 CPU (and 2.11 on an H100 for the CUDA variants): SDPA
(math and CPU flash) gives 0 for a fully masked row (the eager SDPA variants measure this
when they start and declare "nan" where a version gives NaN); the explicit module's softmax gives NaN
there (declared "nan"), and its P @ V lets 0 * NaN through (masked_values "ieee"), as the
math kernel does; it computes in the case dtype (scores "dtype": f16/bf16 scores, softcap and
mask). SDPA adds a boolean mask as -inf, so an Inf or NaN in a masked key's row makes the row
NaN (masked_keys "ieee", measured per forced kernel at start, pytorch#101967). The CUDA SDPA
kernels that flush subnormal values to zero are measured at start (denormals "flush"). TF32: `allow_tf32` maps to torch.backends.cuda.matmul.allow_tf32 and
torch.backends.cudnn.allow_tf32 on the CUDA variants (cap tf32 only there). Dropout:
explicit/compile apply the counter RNG's keep mask (attnfuzz.rng.dropout_keep) as an input;
cuda_sdpa_efficient runs the kernel's own dropout and returns its keep mask, extracted the
way PyTorch's tests do (dropout "keep_mask"; the flash path exists but is not declared: its
debug mask disagreed with its output on one case); the other SDPA and flex variants
declare no dropout. Kernel declines ("No available kernel", the
memory-efficient kernel's alignment and bias-dtype checks, FlexAttention's NYI shapes) are
answered `unsupported` with PyTorch's reason, on every path (the dropout one included). A
CUDA device fault (a sticky error such as "misaligned address") ends the worker, so
attnfuzz records a crash and restarts it.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import time
import warnings

from attnfuzz.targets import _base, _common, _torch_batch, _torch_layouts, _torch_model, _torch_probes
from attnfuzz.targets._torch_model import (_KIND, _VALUE_FIELDS, LSE_BASES, _arguments, _base_of, _config, _host,
                                           _lse_op, backward, combine_masks, from_bhsd, grad_leaves, grads_of,
                                           make_modules, warm_autograd)

# The serving variants (without the cuda_ prefix; run by _torch_serving.ServingTarget, their
# declarations say) and the API each calls.
SERVING_KINDS = {"sdpa_jagged": "jagged", "flex_paged": "flex_paged", "flex_decode": "flex_paged",
                 "varlen": "varlen"}


def _probe(variant):
    """Why a variant cannot run here (None: it can), torch imported."""
    import torch
    base, cuda = _base_of(variant)
    if cuda and not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if base in SERVING_KINDS:
        mods = {"jagged": "torch.nested", "flex_paged": "torch.nn.attention.experimental._paged_attention",
                "varlen": "torch.nn.attention.varlen"}
        try:
            importlib.import_module(mods[SERVING_KINDS[base]])
        except Exception as e:  # noqa: BLE001
            return "%s does not import: %s" % (mods[SERVING_KINDS[base]], e)
        if SERVING_KINDS[base] == "flex_paged" and not cuda and not (
                shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
            return "Inductor on CPU needs a C++ compiler (c++, g++ or clang++) on PATH"
        return None
    if base == "flex":
        try:
            import torch.nn.attention.flex_attention  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return "torch.nn.attention.flex_attention does not import: %s" % e
    if _KIND[base][1] == "compile" and not cuda and not (
            shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        return "Inductor on CPU needs a C++ compiler (c++, g++ or clang++) on PATH"
    return None


_V = _base.Variant
_SERVING = "_torch_serving.ServingTarget"
STACK = _base.Stack("torch", imports=("torch",), pip=("torch==2.15.0",), probe=_probe, trains=True, variants=(
    _V("sdpa_math", "F.scaled_dot_product_attention, math kernel (CPU)"),
    _V("sdpa_flash", "F.scaled_dot_product_attention, flash kernel (CPU; D == Dv)"),
    _V("sdpa_flash_lse", "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu, its logsumexp returned "
       "(CPU; D == Dv)", backward=False),
    _V("explicit", "eager nn.Module: matmul / scale / softcap / masks / softmax / dropout / matmul (CPU)"),
    _V("compile", "torch.compile (Inductor) of the explicit module (CPU)", compiled=True, quick=True,
       smoke=False),
    _V("compile_sdpa", "torch.compile (Inductor) of the SDPA module (CPU)", compiled=True, quick=True,
       smoke=False),
    # "FlexAttention does not support backward on CPU" (torch 2.15, documented)
    _V("flex", "FlexAttention, compiled; structural and boolean masks as a block mask (CPU)", compiled=True,
       quick=True, smoke=False, backward=False),
    _V("cuda_sdpa_math", "F.scaled_dot_product_attention, math kernel (CUDA)", gpu=True),
    _V("cuda_sdpa_flash", "F.scaled_dot_product_attention, flash kernel (CUDA)", gpu=True),
    _V("cuda_sdpa_efficient", "F.scaled_dot_product_attention, memory-efficient kernel (CUDA)", gpu=True),
    _V("cuda_sdpa_cudnn", "F.scaled_dot_product_attention, cuDNN kernel (CUDA)", gpu=True),
    _V("cuda_sdpa_flash_lse", "torch.ops.aten._scaled_dot_product_flash_attention, its logsumexp returned "
       "(CUDA; D == Dv; is_causal, no mask)", gpu=True, backward=False),
    _V("cuda_sdpa_efficient_lse", "torch.ops.aten._scaled_dot_product_efficient_attention, its log_sumexp "
       "returned (CUDA)", gpu=True, backward=False),
    _V("cuda_sdpa_cudnn_lse", "torch.ops.aten._scaled_dot_product_cudnn_attention, its logsumexp returned (CUDA)",
       gpu=True, backward=False),
    _V("cuda_explicit", "eager explicit module (CUDA)", gpu=True),
    _V("cuda_compile", "torch.compile of the explicit module (CUDA)", gpu=True, compiled=True, quick=True),
    _V("cuda_compile_sdpa", "torch.compile of the SDPA module (CUDA)", gpu=True, compiled=True, quick=True),
    _V("cuda_flex", "FlexAttention, compiled (CUDA)", gpu=True, compiled=True, quick=True),
    # serving paths (attnfuzz.targets._torch_serving); forward only
    _V("sdpa_jagged", "F.scaled_dot_product_attention on nested jagged tensors (THD + offsets, CPU)",
       backward=False, serving=("packed",), target=_SERVING),
    _V("flex_paged", "FlexAttention over a page cache (PagedAttention), ALiBi score_mod, compiled (CPU)",
       compiled=True, quick=True, smoke=False, backward=False, serving=("packed", "paged", "alibi"),
       target=_SERVING),
    _V("cuda_sdpa_jagged", "SDPA on nested jagged tensors (CUDA)", gpu=True, backward=False, serving=("packed",),
       target=_SERVING),
    _V("cuda_flex_paged", "FlexAttention over a page cache, ALiBi score_mod, a sink through the LSE (CUDA)",
       gpu=True, compiled=True, quick=True, backward=False, serving=("packed", "paged", "sinks", "alibi"),
       target=_SERVING),
    _V("cuda_flex_decode", "FlexAttention's decode kernel (at most 16 queries) over a page cache (CUDA)",
       gpu=True, compiled=True, quick=True, backward=False, serving=("packed", "paged", "sinks", "alibi"),
       target=_SERVING),
    _V("cuda_varlen", "torch.nn.attention.varlen.varlen_attn: FlashAttention varlen, paged KV where torch has it "
       "(CUDA)", gpu=True, backward=False, serving=("packed", "paged"), target=_SERVING),
))


# ---------------------------------------------------------------------------------------
# The worker side: declarations, caching, the run function.
# ---------------------------------------------------------------------------------------

# GPU memory a CUDA worker keeps cached between cases (see main).
_CUDA_KEEP_BYTES = 1 << 30
_CUDA_KEEP_EVERY = 32

# Messages of the CUDA kernels' own input checks (raised after dispatch chose the kernel,
# cleanly, the CUDA context intact): the case is unsupported by that kernel, not a bug.
_KERNEL_CHECKS = {
    "EFFICIENT_ATTENTION": ("is not correctly aligned", "invalid dtype for bias", "cutlassF: no kernel found",
                            "cutlassB: no kernel found", "last dimension must be contiguous"),
    "FLASH_ATTENTION": ("must have contiguous last dimension",),
}





_SDPA_SELECTED = {"target": None, "ctx": None}


def _select_sdpa(target):
    """Restricts SDPA to target's kernel (sdpa_kernel([...]), entered) or lifts the
    restriction for a target without one, and keeps it so until another target of this
    process asks otherwise: a worker runs one variant, so this happens once, where entering
    sdpa_kernel per case cost a tenth of a tiny case; the self-tests run several variants
    in one process."""
    if _SDPA_SELECTED["target"] is target:
        return
    if _SDPA_SELECTED["ctx"] is not None:
        _SDPA_SELECTED["ctx"].__exit__(None, None, None)
        _SDPA_SELECTED["ctx"] = None
    if target.sdpa_ctx is not None:
        ctx = target.sdpa_ctx()
        ctx.__enter__()
        _SDPA_SELECTED["ctx"] = ctx
    _SDPA_SELECTED["target"] = target




class Target(_base.Target):
    STACK = STACK
    LAZY_COMPILE = True          # torch.compile compiles on the first call

    def __init__(self, variant: str):
        import torch
        self.torch = torch
        self.base, self.cuda = _base_of(variant)
        self.kind, self.backend = _KIND[self.base]
        self.device = "cuda" if self.cuda else "cpu"
        self.compiled = self.backend == "compile"
        # cuDNN builds an execution plan per shape on its first call (on an H100: 58 ms
        # median for a new shape, 0.06 ms for a repeated one): counted as compiling, so
        # that a batch shares one structure and its plan
        self.PLANS = self.cuda and self.backend == "CUDNN_ATTENTION"
        self._cases = 0
        self._staging = None
        self._download = None
        self._deferred = False  # in a CUDA batch: execute leaves the results on the device
        self._tf32 = None  # the allow_tf32 flags last set (execute sets them when a case changes them)
        self.CACHE_SIZE = 32 if self.compiled else 256
        super().__init__(variant)
        torch.set_num_threads(1)
        if self.compiled:
            import torch._dynamo as dynamo
            # One code object serves every cached module: without this, the ninth structure
            # would silently fall back to eager.
            for name, value in (("recompile_limit", 1 << 20), ("cache_size_limit", 1 << 20),
                                ("accumulated_recompile_limit", 1 << 20),
                                ("accumulated_cache_size_limit", 1 << 20),
                                ("fail_on_recompile_limit_hit", True)):
                if hasattr(dynamo.config, name):
                    setattr(dynamo.config, name, value)
        self.SDPAModule, self.ExplicitModule, self.FlexModule = make_modules()
        self.sdpa_ctx = None
        if self.kind == "sdpa" and self.backend not in (None, "compile"):
            from torch.nn.attention import SDPBackend, sdpa_kernel
            self.sdpa_ctx = lambda: sdpa_kernel([getattr(SDPBackend, self.backend)])
        torch.set_grad_enabled(False)  # inference only, in this process
        # The CUDA flash and cuDNN kernels take f16/bf16 only.
        self.dtypes = (["f16", "bf16"] if (self.cuda and self.base in ("sdpa_flash", "sdpa_cudnn", "sdpa_flash_lse",
                                                                      "sdpa_cudnn_lse"))
                       else ["f32", "f16", "bf16"])

    # -- declarations ------------------------------------------------------------------
    def libs(self):
        return dict(super().libs(), **_common.torch_libs(self.torch, self.cuda, self.device))

    def declare(self) -> dict:
        caps = ["f32", "f16", "bf16", "gqa", "cross", "dv", "scale", "amask", "bmask", "causal",
                "padding", "window", "strided", "mask_dtype"]
        conventions = {}
        if self.kind == "explicit":
            caps += ["softcap", "dropout"]
            # the module computes in the case dtype: f16/bf16 scores, softcap, and the
            # additive mask cast to the scores' dtype (as its forward says)
            conventions.update(masked_rows="nan", masked_values="ieee", dropout="counter", scores="dtype")
        if self.kind == "flex":
            # the block mask gives masked keys of a partly masked block weight 0, and P @ V
            # runs over them: 0 * NaN leaks (measured by the self-test on torch 2.15 CPU)
            caps.append("softcap")
            conventions["masked_values"] = "ieee"
        if self.kind == "sdpa":
            # Whether P @ V runs over masked keys too, so that a NaN in a masked value row
            # leaks (pytorch#101967): measured per kernel at start where one is forced, known
            # for the compiled module (Inductor's decomposition of the math kernel).
            leaks = self.backend == "compile" or (self.sdpa_ctx is not None and self._probe(_torch_probes.masked_values_leak))
            conventions["masked_values"] = "ieee" if leaks else "exclude"
            # The flash kernel's debug mask did not match its output on one random case
            # (B1 H8 S8 D8, p 0.5) on an H100: not declared until that is understood.
            if self.cuda and self.backend == "EFFICIENT_ATTENTION":
                caps.append("dropout")
                conventions["dropout"] = "keep_mask"
        if self.kind == "sdpa" and self.sdpa_ctx is not None and self._probe(_torch_probes.masked_rows_nan):
            conventions["masked_rows"] = "nan"
        # SDPA adds a boolean mask as -inf: measured where a kernel is forced, known for the
        # compiled module (Inductor's decomposition adds it as the math kernel does)
        if self.kind == "sdpa" and (self.backend == "compile" or (self.sdpa_ctx is not None and self._probe(_torch_probes.masked_keys_leak))):
            conventions["masked_keys"] = "ieee"
        # CUDA kernels that flush subnormal values to zero (measured on a probe)
        if self.cuda and self.kind == "sdpa" and self._flushes_denormals():
            conventions["denormals"] = "flush"
        # the CPU's bf16 GEMM (oneDNN on AVX512_BF16 / AMX: VDPBF16PS) reads subnormal bf16
        # as 0 on larger products: bf16 V of 1e-39 gave 0 from explicit, compile and
        # sdpa_jagged alike (measured on a probe)
        if not self.cuda and "bf16" in self.dtypes and _torch_layouts.cpu_bf16_gemm_flushes():
            conventions["denormals"] = ["bf16"]
        if self.cuda:
            caps.append("tf32")
        if self.base in LSE_BASES:
            caps.append("lse")  # natural log (the op's logsumexp)
            if not self.cuda or self.base == "sdpa_efficient_lse":
                # a fully masked row's logsumexp is 0 (the output's 0 with it), not log 0 =
                # -inf (measured by tests/targets_selftest.py, which prints it: torch 2.15
                # CPU; the CUDA memory-efficient op on an H200, torch 2.11); the CUDA flash op
                # takes no mask and the cuDNN op's self-test printed no such row
                conventions["lse_masked_rows"] = "zero"
        limits = {"max_head_dim": 256} if (self.base == "sdpa_flash" and self.cuda) else {}
        if self.cuda and self.base in LSE_BASES:
            # SDPA pads D to a multiple of 8 before calling these ops; called directly they
            # get D as it is
            limits = {"max_head_dim": 256, "head_dim_multiple": 8}
        decl = {"caps": caps, "dtypes": self.dtypes, "limits": limits, "conventions": conventions}
        if self.decl.compiled:
            decl["compile_timeout"] = _common.INDUCTOR_COMPILE_TIMEOUT
        if self.decl.backward:
            warm_autograd(self.torch, self.device)
            # SDPA's documentation: on CUDA the fused kernels may pick nondeterministic
            # algorithms (the flash and memory-efficient backward accumulate dQ with atomics
            # unless torch.use_deterministic_algorithms is on; cuDNN's likewise)
            if self.cuda and self.kind == "sdpa" and self.backend in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION",
                                                                      "CUDNN_ATTENTION"):
                decl["deterministic"] = {"forward": True, "backward": False}
        return decl

    def _sdpa(self, **kw):
        """F.scaled_dot_product_attention under the variant's forced kernel (the probes')."""
        torch = self.torch
        with torch.no_grad(), self.sdpa_ctx():
            return torch.nn.functional.scaled_dot_product_attention(**kw)

    def _probe(self, probe):
        """A dense SDPA probe of _torch_probes on the forced kernel, in the first dtype."""
        torch = self.torch
        dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[self.dtypes[0]]
        return probe(torch, self._sdpa, dt, self.device, self.cuda)

    def _flushes_denormals(self) -> bool:
        """Measured: does a V of subnormal values (f32: about 1e-39; bf16 has f32's exponent
        range) come out 0, or, in f32, off by more than a subnormal's rounding (1e-4 of it,
        where the math kernel is within 5e-6)? The memory-efficient kernel's f32 path keeps
        about 11 bits of a subnormal V (0.25% on an H100, 2026-11-28: f32 as TF32 pieces
        whose low part is flushed, by the look of it): a partial flush, which the oracle's
        model of flushing (its room for every flushed product) covers. Only dtypes whose
        subnormals are subnormal in f32 can show it."""
        torch = self.torch
        name = next((d for d in self.dtypes if d != "f16"), "")
        dt = {"f32": torch.float32, "bf16": torch.bfloat16}.get(name)
        if dt is None:
            return False
        q = torch.ones(1, 1, 2, 16, dtype=dt, device=self.device)
        v = _torch_layouts.subnormal_values(torch, (1, 1, 2, 16), dt, self.device)
        attend = ((lambda q, k, v: self._sdpa(query=q, key=k, value=v)) if self.sdpa_ctx is not None
                  else torch.nn.functional.scaled_dot_product_attention)
        return _torch_probes.flushes_denormals(torch, attend, q, v, 2, True, partial=name == "f32")

    # -- running -----------------------------------------------------------------------
    def refuse(self, req):
        from attnfuzz.worker import Unsupported
        case = req.case
        if self.base in ("sdpa_flash", "sdpa_flash_lse") and case.head_dim != case.v_head_dim:
            raise Unsupported("the flash kernel needs head_dim == v_head_dim")
        if self.cuda and self.base == "sdpa_flash_lse":
            cfg = _config(case, self.base, self.cuda)
            if case.amask is not None or case.bmask is not None or cfg["struct"]:
                raise Unsupported("the CUDA flash op takes no attn_mask (is_causal only)")
            if cfg["is_causal"] and case.q_len != case.kv_len:
                # FlashAttention-2's causal mask sits on the bottom-right diagonal; SDPA's
                # is_causal is top-left, and SDPA does not send such a case to this op
                raise Unsupported("the CUDA flash op's is_causal with Sq != Sk is bottom-right, not SDPA's")
        if self.cuda and self.base in ("sdpa_efficient_lse", "sdpa_cudnn_lse") and case.amask is not None \
                and case.amask.get("dtype", "f32") != case.dtype:
            # the ops check "invalid dtype for bias - should match query's dtype"; rounding the
            # mask to Q's dtype here would change the case
            raise Unsupported("the CUDA op takes an attn_bias in Q's dtype only")
        if self.kind == "sdpa" and case.dropout_p >= 1.0 and self.cuda:
            raise Unsupported("dropout p = 1 (the fused kernels take p < 1)")

    def structure(self, req):
        # A compiled module bakes its whole configuration in: every field is in its key. An
        # eager module holds nothing but its configuration, set per case (configure): one
        # module serves every case (building one per case cost a quarter of a millisecond),
        # but for cuDNN, whose plan per structure is timed as compiling (PLANS).
        if not self.compiled and not self.PLANS:
            return ("eager",)
        case = req.case
        cfg = _config(case, self.base, self.cuda)
        key = (case.key("shapes", "dtype", "layouts", "masks", "causal", "scale", "softcap", "dropout")
               + (("backward", case.grads),) if self.compiled else case.grads)
        return key, tuple(sorted((k, v) for k, v in cfg.items() if self.compiled or k not in _VALUE_FIELDS))

    def build(self, req):
        if self.compiled and len(self.cache) >= self.cache.capacity:
            import torch._dynamo
            torch._dynamo.reset()          # drop every guard set with the evicted modules
            self.cache.clear()
        cfg = _config(req.case, self.base, self.cuda)
        cls = {"sdpa": self.SDPAModule, "explicit": self.ExplicitModule, "flex": self.FlexModule}[self.kind]
        mod = cls(cfg).to(self.device).eval()
        if self.compiled:
            mod = self.torch.compile(mod, dynamic=False, fullgraph=True)
        return mod

    def execute(self, mod, req):
        from attnfuzz.worker import Result
        torch = self.torch
        case = req.case
        if self.cuda and self._tf32 != bool(case.allow_tf32):
            self._tf32 = bool(case.allow_tf32)
            torch.backends.cuda.matmul.allow_tf32 = self._tf32
            torch.backends.cudnn.allow_tf32 = self._tf32
        cfg = _config(case, self.base, self.cuda)
        if not self.compiled:
            mod.configure(cfg)
        args = _arguments(req, cfg, self.device)
        try:
            if self.kind == "sdpa" and case.dropout_p > 0.0:
                return self._run_sdpa_dropout(req, mod, cfg, args)
            _select_sdpa(self)
            if case.grads:
                o, g = backward(case, req.dout, cfg, lambda a: mod(*a), args, self.device)
                res = Result(o, layout="bhsd", grads=g)
            elif self.base in LSE_BASES:
                o, lse = mod.forward_lse(*args)
                res = Result(o, layout=cfg["out_layout"], lse=lse if req.want_lse else None)
            else:
                res = Result(mod(*args), layout=cfg["out_layout"])
            if self._deferred:
                return res      # run_batch brings the batch's tensors back with one wait
            if self.cuda:
                # a single case synchronized: a device fault shows on the case that caused it
                torch.cuda.synchronize()
            return _host(res)
        except RuntimeError as e:
            if "No available kernel" in str(e):
                from attnfuzz.worker import Unsupported
                raise Unsupported(f"{self.backend} declines the case: {self._why(mod, args)}") from None
            raise
        finally:
            # Many workers share one GPU: what PyTorch's caching allocator keeps after a
            # big case is given back, so that a restarted worker still finds room for its
            # CUDA context.
            # memory_reserved() reads every allocator statistic (0.5 ms on an H100 host,
            # measured): asked every _CUDA_KEEP_EVERY cases, and after a case of 16 MiB
            self._cases += 1
            if self.cuda and (self._cases % _CUDA_KEEP_EVERY == 0
                              or req.q.nbytes + req.k.nbytes + req.v.nbytes > 1 << 24) \
                    and torch.cuda.memory_reserved() > _CUDA_KEEP_BYTES:
                torch.cuda.empty_cache()

    def run_batch(self, requests):
        """A batch's cases run back to back and their results brought to the host with one
        wait at the end (_torch_batch.Download; on the CPU too, so that the tests run this
        path); on CUDA every input of the batch is uploaded in one copy first
        (_torch_batch.Staging). ATTNFUZZ_TORCH_STAGING=0 and ATTNFUZZ_TORCH_DEFER=0 in the
        worker's environment turn them off, to compare. The cases run without a
        synchronization between them, so a device fault may show on a later case than the
        one that caused it, or only at the batch's wait: unless it shows on the batch's
        first case, the worker exits without answering, and attnfuzz sends the batch's
        cases again one by one (docs/worker-protocol.md, "Batches"), each synchronized."""
        if self.cuda and os.environ.get("ATTNFUZZ_TORCH_STAGING", "1") != "0":
            if self._staging is None:
                self._staging = _torch_batch.Staging(self.torch)
            requests = self._staging.upload(requests, self.device)
        if len(requests) < 2 or os.environ.get("ATTNFUZZ_TORCH_DEFER", "1") == "0":
            return super().run_batch(requests)
        from attnfuzz.worker import Fault, Result
        self._deferred = True
        try:
            outs = super().run_batch(requests)
        finally:
            self._deferred = False
        if outs and isinstance(outs[-1], Fault) and len(outs) > 1:
            _base.fault_exit()          # an earlier case's kernels may have caused it
        if self._download is None:
            self._download = _torch_batch.Download(self.torch)
        t0 = time.perf_counter()
        try:
            self._download.fetch([r for r in outs if isinstance(r, Result)])
        except Exception as e:  # noqa: BLE001
            if self.fatal(e):
                _base.report_fault(e)
                _base.fault_exit()      # which case: unknown
            raise
        waited = (time.perf_counter() - t0) / len(outs)
        for r in outs:
            if isinstance(r, Result):
                r.run_s = (r.run_s or 0.0) + waited
        return outs

    def refusal(self, exc):
        msg = str(exc)
        if self.cuda and any(m in msg for m in _KERNEL_CHECKS.get(self.backend, ())):
            # The kernel's own input checks, run after dispatch chose it: a clean refusal.
            return f"{self.backend}: {msg.splitlines()[0]}"
        if self.kind == "flex" and "NotImplementedError: NYI" in msg:
            # FlexAttention's documented not-yet-implemented shapes (e.g. D < 16 on CUDA).
            return "flex_attention: " + msg.split("NYI:", 1)[1].splitlines()[0].strip()
        return None

    def fatal(self, exc):
        # A device fault leaves the CUDA context unusable: every later case would fail.
        return self.cuda and ("CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError")

    def _why(self, mod, args) -> str:
        """The warnings PyTorch gives for a declined kernel, as the unsupported reason."""
        torch = self.torch
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            try:
                with torch.no_grad(), self.sdpa_ctx():
                    mod(*args)
            except RuntimeError:
                pass
        reasons = [str(x.message).split(" (Triggered")[0] for x in w
                   if "kernel not used because" not in str(x.message)]
        return "; ".join(reasons)[:400] or "no reason given"

    def _kernel_accepts(self, q, k, v, bias, p, causal):
        """The op _run_sdpa_dropout calls directly gets no input checks: F.sdpa's own for
        that kernel first (can_use_flash_attention / can_use_efficient_attention), their
        warnings as the refusal. Without them, V rows of 63 bf16 elements reached the
        efficient kernel and faulted the device (misaligned address) on an H100, a fault
        F.sdpa never lets happen."""
        from attnfuzz.worker import Unsupported
        from torch.backends.cuda import SDPAParams, can_use_efficient_attention, can_use_flash_attention
        can = can_use_flash_attention if self.backend == "FLASH_ATTENTION" else can_use_efficient_attention
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ok = can(SDPAParams(q, k, v, bias, p, causal, False), True)
        if not ok:
            why = "; ".join(str(x.message).split(" (Triggered")[0] for x in w) or "its input checks"
            raise Unsupported(f"{self.backend} declines the case: {why}")

    def _run_sdpa_dropout(self, req, mod, cfg, args):
        """CUDA flash / memory-efficient SDPA with dropout: the kernel's own Philox RNG, its
        keep mask extracted the way PyTorch's tests do (test_transformers.py): the flash
        op's debug mask (negative = dropped), or _fill_mem_eff_dropout_mask_ replaying the
        efficient kernel's uniforms from its seed and offset (kept where u > p). The op is
        called directly (F.sdpa returns no mask); inputs go through the module's layout code
        first."""
        from attnfuzz.worker import Result, Unsupported
        torch = self.torch
        case = req.case
        with torch.set_grad_enabled(bool(case.grads)):
            leaves = None
            if case.grads:
                # the kernel's op is differentiable: its backward replays the same seed and
                # offset, so the keep mask extracted below is the backward's too
                args, leaves = grad_leaves(case, args)
            q, k, v = mod._inputs(*args[:3])
            if cfg["hq"] != cfg["hkv"]:
                rep = cfg["hq"] // cfg["hkv"]
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            q, k, v = (t.contiguous() for t in (q, k, v))
            add, bmask, struct = args[3], args[4], args[5]
            p = float(case.dropout_p)
            B, H, Sq, Sk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
            if self.backend == "FLASH_ATTENTION":
                if add is not None or bmask is not None or struct is not None:
                    raise Unsupported("the flash kernel takes no attn_mask")
                self._kernel_accepts(q, k, v, None, p, cfg["is_causal"])
                outs = torch.ops.aten._scaled_dot_product_flash_attention(
                    q, k, v, p, cfg["is_causal"], return_debug_mask=True, scale=cfg["scale_arg"])
                out, dbg = outs[0], outs[-1]
                keep = (dbg[:, :, :Sq, :Sk] >= 0)
            else:
                bias = combine_masks(None if add is None else add.to(q.dtype), bmask, struct, q.dtype)
                if bias is not None and bias.dtype == torch.bool:
                    zero = torch.zeros((), dtype=q.dtype, device=q.device)
                    bias = torch.where(bias, zero, zero - float("inf"))
                if bias is not None:
                    # As F.sdpa does before this kernel: a contiguous bias whose rows are
                    # padded to a multiple of 16 elements (the kernel's alignment rule).
                    pad = (-Sk) % 16
                    full = torch.zeros((B, H, Sq, Sk + pad), dtype=q.dtype, device=q.device)
                    full[..., :Sk] = bias.expand(B, H, Sq, Sk)
                    bias = full[..., :Sk]
                self._kernel_accepts(q, k, v, bias, p, cfg["is_causal"])
                outs = torch.ops.aten._scaled_dot_product_efficient_attention(
                    q, k, v, bias, True, p, cfg["is_causal"], scale=cfg["scale_arg"])
                out, seed, offset = outs[0], int(outs[2].item()), int(outs[3].item())
                # The kernel's uniforms replayed from its seed and offset: kept where u > p.
                with torch.no_grad():
                    m = torch.empty((B, H, Sq, Sk), device=q.device, dtype=torch.float32)
                    m = torch.ops.aten._fill_mem_eff_dropout_mask_(m, p, seed, offset)
                keep = m > p
            out = from_bhsd(out, cfg["out_layout"])
            if case.grads:
                o, g = grads_of(case, req.dout, cfg, out, leaves, self.device)
                res = Result(o, layout="bhsd", grads=g)
            else:
                res = Result(out, layout=cfg["out_layout"])
        torch.cuda.synchronize()
        res.dropout_keep = keep
        return _host(res)


def repro_snippet(variant: str) -> str:
    """Standalone source: `attention(req)` and `gradients(req)` with torch and numpy only
    (the model code of _torch_model the worker runs, on the same physical inputs); returns
    the output as [B, Hq, Sq, Dv]. (A serving variant's: _torch_serving.repro_snippet, the
    module of the class that runs it.)"""
    if STACK.variant(variant).target:
        raise ValueError("torch/%s runs as %s: its repro snippet is that module's" % (variant, _SERVING))
    base, cuda = _base_of(variant)
    kind, backend = _KIND[base]
    sdpa_backend = backend if kind == "sdpa" and backend not in (None, "compile") else None
    return _common.snippet(
        ["import torch"],
        _torch_layouts.FUNCTIONS + (combine_masks, grad_leaves, grads_of, backward, _torch_model.struct_input,
                                    _lse_op, _config, _arguments, _torch_model._Base, make_modules),
        consts={"_KIND": _KIND, "LSE_BASES": LSE_BASES},
        tail=f'''

def model(req):
    """{variant}'s module on the case's device, its config, its arguments from the request's
    physical inputs, the device, and the context that forces its SDPA kernel (if any)."""
    import contextlib
    case = req.case
    dev = {"'cuda'" if cuda else "'cpu'"}
    if dev == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = bool(case.allow_tf32)
        torch.backends.cudnn.allow_tf32 = bool(case.allow_tf32)
    SDPAModule, ExplicitModule, FlexModule = make_modules()
    cfg = _config(case, {base!r}, {cuda!r})
    cls = {{'sdpa': SDPAModule, 'explicit': ExplicitModule, 'flex': FlexModule}}[{kind!r}]
    mod = cls(cfg).to(dev).eval()
    if {backend == 'compile'!r}:
        mod = torch.compile(mod, dynamic=False, fullgraph=True)
    args = _arguments(req, cfg, dev)
    kernel = {sdpa_backend!r}      # the SDPA kernel this variant forces, if any
    if kernel is None:
        return mod, cfg, args, dev, contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return mod, cfg, args, dev, sdpa_kernel([getattr(SDPBackend, kernel)])


def attention(req):
    """{variant}: req.q, req.k, req.v (and masks) as numpy arrays in the case's physical
    layout; req.keep is the dropout keep mask [B, Hq, Sq, Sk] when the case has dropout.
    Returns the output as [B, Hq, Sq, Dv]."""
    case = req.case
    mod, cfg, args, dev, forced = model(req)
    with torch.no_grad(), forced:
        out = {"mod.forward_lse(*args)[0]" if base in LSE_BASES else "mod(*args)"}
    return layouts.to_bhsd(to_numpy(out), cfg['out_layout'], case.q_heads, case.v_head_dim)


def gradients(req):
    """{variant}, backward as a training step runs it: out.backward(req.dout) (the upstream
    gradient, numpy, in the output layout) on leaves made from the physical inputs. Returns
    the gradients the case asks for as numpy: dq, dk, dv as [B, H, S, D], dmask at the
    mask's shape."""
    mod, cfg, args, dev, forced = model(req)
    with forced:
        _, g = backward(req.case, req.dout, cfg, lambda a: mod(*a), args, dev)
    return {{n: to_numpy(t) for n, t in g.items()}}
''')


if __name__ == "__main__":
    sys.exit(_base.main(STACK))
