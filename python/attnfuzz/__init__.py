"""attnfuzz's Python side (docs/design.md section 7).

Modules, one per concern:
  protocol   frames of the worker protocol (docs/worker-protocol.md) and tensor entries
  dtypes     the protocol's dtype names and their numpy dtypes
  case       Case: a run request's case object with its derived values
  layouts    the physical layouts as views of canonical [B, H, S, D]
  rng        Philox4x32-10 and the counter-based dropout keep rule
  masks      structural masks and the additive/boolean masks broadcast to [B, Hq, Sq, Sk]
  reference  docs/design.md section 2 in numpy float64
  worker     serve(): a worker in about twenty lines
  bundle     the repro bundle loader (numpy + zstandard only)
  targets    one worker module per real stack
"""

__version__ = "0.1.0"
