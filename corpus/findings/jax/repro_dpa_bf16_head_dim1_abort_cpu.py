"""JAX / XLA:CPU: jax.jit(jax.nn.dot_product_attention) on bfloat16 with a head dim of 1 and
64 or more tokens aborts the process (no exception):
"F ... ynn_emitter.cc:201] Check failed: instr->opcode() == HloOpcode::kBitcast (reshape vs.
bitcast)". 32 tokens, float32, or a head dim of 2 run. Found by attnfuzz (target:jax/xla, a
bf16 qkv_bsh3d case with head_dim 1: the worker was killed by signal 6).

Run: python repro_dpa_bf16_head_dim1_abort_cpu.py   (jax 0.10.2 on a CPU)

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed. The call runs in a child process: the abort takes its process down.
"""
import os
os.environ["JAX_PLATFORMS"] = "cpu"  # an XLA:CPU bug: on a GPU machine jax would run on the GPU
import subprocess
import sys

CHILD = r'''
import jax, jax.numpy as jnp
f = jax.jit(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, implementation="xla"))
q = jnp.ones((1, 64, 1, 1), jnp.bfloat16)             # [B, T, N, H]: 64 tokens, head dim 1
print("max", float(f(q, q, q).block_until_ready().max()))
'''
p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
check = [l for l in p.stderr.splitlines() if "Check failed" in l]
print("child exit", p.returncode, "|", (check[0] if check else p.stdout.strip() or p.stderr.strip()[-300:]))
if p.returncode != 0:
    print("BUG: jit(dot_product_attention) on bf16 with head dim 1 aborts the process")
    sys.exit(1)
print("FIXED: bf16 with head dim 1 runs")
sys.exit(0)
