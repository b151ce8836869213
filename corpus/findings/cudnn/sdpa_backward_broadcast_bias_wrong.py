"""cuDNN's SDPA backward graph (the frontend's `graph.sdpa_backward` with `dBias`) accepts a bias
broadcast over the key or query dimension, [B, 1, Sq, 1] or [B, 1, 1, Sk], and returns a wrong
dBias (up to 1.8 off where the exact gradient is 0 or 1.9) and, for [B, 1, 1, Sk], a wrong dQ too
(0.78 off); the full-shaped biases [1, H, Sq, Sk], [B, H, Sq, Sk] and [1, 1, Sq, Sk] are right
within f16 rounding. Neither validate() nor check_support() refuses the graph (TransformerEngine
notes cuDNN supports dBias for b1ss, bhss, 11ss and 1hss only, NVIDIA/TransformerEngine#2537).
Found by attnfuzz's target:cudnn/sdpa (random backward cases with an additive mask of
full_dims "bq", key padding), confirmed by this script on an H200 (cuDNN 9.19.0, frontend 1.32.0).

Exit status: 1 with a BUG line while the bug is present, 0 with a FIXED line once it is
fixed (or refused), 77 with a SKIP line where it cannot run (no CUDA GPU, no cuDNN frontend).
"""
import sys

import torch

try:
    import cudnn
except ImportError:
    print("SKIP: needs nvidia-cudnn-frontend (import cudnn)")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: needs a CUDA GPU")
    sys.exit(77)
h = cudnn.create_handle()
torch.manual_seed(0)
def run(B,H,Sq,Sk,D,bshape,pad):
    dt=torch.float16
    q=torch.randn(B,H,Sq,D,device='cuda',dtype=dt); k=torch.randn(B,H,Sk,D,device='cuda',dtype=dt); v=torch.randn(B,H,Sk,D,device='cuda',dtype=dt)
    bias=torch.randn(*bshape,device='cuda',dtype=dt); do=torch.randn(B,H,Sq,D,device='cuda',dtype=dt)
    lens=torch.tensor(pad,dtype=torch.int32,device='cuda').reshape(B,1,1,1); lq=torch.full((B,1,1,1),Sq,dtype=torch.int32,device='cuda')
    # reference in float64
    qd,kd,vd,bd=(x.double().requires_grad_() for x in (q,k,v,bias))
    s=qd@kd.transpose(-1,-2)*0.3+bd
    m=torch.arange(Sk,device='cuda').reshape(1,1,1,Sk)>=lens.long()
    s=s.masked_fill(m,float('-inf')); o=torch.softmax(s,-1)@vd; o.backward(do.double())
    F=cudnn.data_type.FLOAT
    g=cudnn.pygraph(io_data_type=cudnn.data_type.HALF,intermediate_data_type=F,compute_data_type=F,handle=h)
    tq,tk,tv,tb=(g.tensor_like(x) for x in (q,k,v,bias)); tl=g.tensor_like(lq); tk2=g.tensor_like(lens)
    O,st=g.sdpa(name='f',q=tq,k=tk,v=tv,attn_scale=0.3,bias=tb,use_padding_mask=True,seq_len_q=tl,seq_len_kv=tk2,generate_stats=True)
    out=torch.empty_like(do); stats=torch.empty(B,H,Sq,1,device='cuda',dtype=torch.float32)
    O.set_output(True).set_dim(list(out.shape)).set_stride(list(out.stride())); st.set_output(True).set_data_type(F).set_dim(list(stats.shape)).set_stride(list(stats.stride()))
    for f in (g.validate,g.build_operation_graph,lambda:g.create_execution_plans([cudnn.heur_mode.A,cudnn.heur_mode.FALLBACK]),g.check_support,g.build_plans): f()
    ws=torch.empty(max(1,g.get_workspace_size()),dtype=torch.uint8,device='cuda')
    g.execute({tq:q,tk:k,tv:v,tb:bias,tl:lq,tk2:lens,O:out,st:stats},ws,handle=h)
    b=cudnn.pygraph(io_data_type=cudnn.data_type.HALF,intermediate_data_type=F,compute_data_type=F,handle=h)
    bq,bk,bv,bo,bdo,bb=(b.tensor_like(x) for x in (q,k,v,out,do,bias)); bs=b.tensor_like(stats); bl=b.tensor_like(lq); bk2=b.tensor_like(lens); db=b.tensor_like(bias)
    dq,dk,dv=b.sdpa_backward(name='b',q=bq,k=bk,v=bv,o=bo,dO=bdo,stats=bs,attn_scale=0.3,bias=bb,dBias=db,use_padding_mask=True,seq_len_q=bl,seq_len_kv=bk2)
    gq=torch.empty_like(q);gk=torch.empty_like(k);gv=torch.empty_like(v);gb=torch.zeros_like(bias)
    for t,x in ((dq,gq),(dk,gk),(dv,gv)): t.set_output(True).set_dim(list(x.shape)).set_stride(list(x.stride()))
    for f in (b.validate,b.build_operation_graph,lambda:b.create_execution_plans([cudnn.heur_mode.A,cudnn.heur_mode.FALLBACK]),b.check_support,b.build_plans): f()
    ws=torch.empty(max(1,b.get_workspace_size()),dtype=torch.uint8,device='cuda')
    b.execute({bq:q,bk:k,bv:v,bo:out,bdo:do,bs:stats,bb:bias,bl:lq,bk2:lens,db:gb,dq:gq,dk:gk,dv:gv},ws,handle=h); torch.cuda.synchronize()
    e=(gb.double()-bd.grad).abs().max().item(); eq=(gq.double()-qd.grad).abs().max().item()
    print(f"B{B} H{H} Sq{Sq} Sk{Sk} bias{bshape} key lengths {pad}: dBias error {e:.3g} (|dBias| {bd.grad.abs().max().item():.3g}), dQ error {eq:.3g}")
    return max(e, eq) < 0.05
bad = []
for bshape,pad in (((1,2,6,9),[9,9,9]),((1,2,6,9),[2,4,7]),((3,1,6,1),[9,9,9]),((3,1,6,1),[2,4,7]),((3,2,6,9),[2,4,7]),((1,1,6,9),[2,4,7]),((3,1,1,9),[2,4,7])):
    try:
        if not run(3,2,6,9,8,bshape,pad):
            bad.append(bshape)
    except Exception as ex:  # refused: no wrong answer
        print(bshape, pad, 'refused:', type(ex).__name__, str(ex)[:150])
print(f"cudnn frontend {cudnn.__version__}, cuDNN {cudnn.backend_version()}")
if bad:
    print(f"BUG: dBias (or dQ) wrong for bias shapes {sorted(set(bad))}")
    sys.exit(1)
print("FIXED: every bias shape's gradients are right or refused")
sys.exit(0)
