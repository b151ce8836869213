/* layout.c - the eight physical layouts of docs/design.md section 3 as views of the canonical
 * [B, H, S, D] tensor, and the strides a tensor spec (perm, pad, broadcast) gives them. */
#include <string.h>

#include "attnfuzz/tensor.h"
#include "layout_internal.h"

int af_layout_shape(af_layout l, size_t B, size_t H, size_t S, size_t D, size_t ne[AF_MAX_DIMS]) {
    switch (l) {
    case AF_LAYOUT_BHSD: ne[0] = B, ne[1] = H, ne[2] = S, ne[3] = D; return 4;
    case AF_LAYOUT_BSHD: ne[0] = B, ne[1] = S, ne[2] = H, ne[3] = D; return 4;
    case AF_LAYOUT_SBHD: ne[0] = S, ne[1] = B, ne[2] = H, ne[3] = D; return 4;
    case AF_LAYOUT_BSD: ne[0] = B, ne[1] = S, ne[2] = H * D; return 3;
    case AF_LAYOUT_CHANNELS_FIRST: ne[0] = B, ne[1] = H * D, ne[2] = S; return 3;
    case AF_LAYOUT_QKV_BS3HD: ne[0] = B, ne[1] = S, ne[2] = 3, ne[3] = H, ne[4] = D; return 5;
    case AF_LAYOUT_QKV_BSH3D: ne[0] = B, ne[1] = S, ne[2] = H, ne[3] = 3, ne[4] = D; return 5;
    case AF_LAYOUT_QKV_CHANNELS_FIRST: ne[0] = B, ne[1] = 3 * H * D, ne[2] = S; return 3;
    case AF_LAYOUT_COUNT: break;
    }
    AF_ASSERT(0 && "unknown layout");
    return 0;
}

int af_layout_dim(af_layout l, char which) {
    /* index of the batch ('b') or heads ('h') dimension in the physical shape; -1 if folded */
    switch (l) {
    case AF_LAYOUT_BHSD: return which == 'b' ? 0 : 1;
    case AF_LAYOUT_BSHD: return which == 'b' ? 0 : 2;
    case AF_LAYOUT_SBHD: return which == 'b' ? 1 : 2;
    case AF_LAYOUT_BSD: return which == 'b' ? 0 : -1;
    case AF_LAYOUT_CHANNELS_FIRST: return which == 'b' ? 0 : -1;
    case AF_LAYOUT_QKV_BS3HD: return which == 'b' ? 0 : 3;
    case AF_LAYOUT_QKV_BSH3D: return which == 'b' ? 0 : 2;
    case AF_LAYOUT_QKV_CHANNELS_FIRST: return which == 'b' ? 0 : -1;
    case AF_LAYOUT_COUNT: break;
    }
    return -1;
}

void af_layout_view(af_layout l, const af_tensor *t, af_tensor_id which, size_t H, size_t D, af_view *v) {
    const size_t *nb = t->nb;
    const size_t *ne = t->ne;
    const unsigned char *base = t->data;
    size_t w = (size_t)which;
    v->dtype = t->dtype;
    v->descale = 1.0f; /* an FP8 tensor's owner sets its own (inputs.c) */
    switch (l) {
    case AF_LAYOUT_BHSD:
        v->ne[0] = ne[0], v->ne[2] = ne[2];
        v->nb[0] = nb[0], v->nb[1] = nb[1], v->nb[2] = nb[2], v->nb[3] = nb[3];
        break;
    case AF_LAYOUT_BSHD:
        v->ne[0] = ne[0], v->ne[2] = ne[1];
        v->nb[0] = nb[0], v->nb[1] = nb[2], v->nb[2] = nb[1], v->nb[3] = nb[3];
        break;
    case AF_LAYOUT_SBHD:
        v->ne[0] = ne[1], v->ne[2] = ne[0];
        v->nb[0] = nb[1], v->nb[1] = nb[2], v->nb[2] = nb[0], v->nb[3] = nb[3];
        break;
    case AF_LAYOUT_BSD: /* [B, S, H*D]: channel h*D + d */
        v->ne[0] = ne[0], v->ne[2] = ne[1];
        v->nb[0] = nb[0], v->nb[1] = D * nb[2], v->nb[2] = nb[1], v->nb[3] = nb[2];
        break;
    case AF_LAYOUT_CHANNELS_FIRST: /* [B, H*D, S]: channel h*D + d */
        v->ne[0] = ne[0], v->ne[2] = ne[2];
        v->nb[0] = nb[0], v->nb[1] = D * nb[1], v->nb[2] = nb[2], v->nb[3] = nb[1];
        break;
    case AF_LAYOUT_QKV_BS3HD: /* [B, S, 3, H, D]: all Q heads, then all K heads, then V */
        base += w * nb[2];
        v->ne[0] = ne[0], v->ne[2] = ne[1];
        v->nb[0] = nb[0], v->nb[1] = nb[3], v->nb[2] = nb[1], v->nb[3] = nb[4];
        break;
    case AF_LAYOUT_QKV_BSH3D: /* [B, S, H, 3, D]: Q, K, V of each head adjacent (MHAv2) */
        base += w * nb[3];
        v->ne[0] = ne[0], v->ne[2] = ne[1];
        v->nb[0] = nb[0], v->nb[1] = nb[2], v->nb[2] = nb[1], v->nb[3] = nb[4];
        break;
    case AF_LAYOUT_QKV_CHANNELS_FIRST: /* [B, 3*H*D, S], chunk(3, dim=1): channel w*H*D + h*D + d */
        base += w * H * D * nb[1];
        v->ne[0] = ne[0], v->ne[2] = ne[2];
        v->nb[0] = nb[0], v->nb[1] = D * nb[1], v->nb[2] = nb[2], v->nb[3] = nb[1];
        break;
    case AF_LAYOUT_COUNT: AF_ASSERT(0 && "unknown layout");
    }
    v->ne[1] = H;
    v->ne[3] = D;
    v->data = base;
}

static unsigned af_factorial(int n) {
    unsigned f = 1;
    for (int i = 2; i <= n; i++) f *= (unsigned)i;
    return f;
}

unsigned af_layout_perm_count(af_layout l) {
    size_t ne[AF_MAX_DIMS];
    return af_factorial(af_layout_shape(l, 1, 1, 1, 1, ne));
}

void af_perm_order(unsigned perm, int ndim, int order[AF_MAX_DIMS]) {
    /* Lehmer code: perm 0 is the identity (memory order = logical order). */
    int avail[AF_MAX_DIMS];
    for (int i = 0; i < ndim; i++) avail[i] = i;
    int n = ndim;
    for (int pos = 0; pos < ndim; pos++) {
        unsigned f = af_factorial(ndim - 1 - pos);
        unsigned idx = perm / f;
        perm %= f;
        order[pos] = avail[idx];
        for (int k = (int)idx; k < n - 1; k++) avail[k] = avail[k + 1];
        n--;
    }
}

size_t af_strides_for(af_tensor *t, unsigned perm, unsigned pad, uint32_t bcast_dims) {
    int order[AF_MAX_DIMS];
    af_perm_order(perm, t->ndim, order);
    size_t stride = af_dtype_size(t->dtype);
    bool innermost = true;
    for (int p = t->ndim - 1; p >= 0; p--) {
        int d = order[p];
        if (bcast_dims & (1u << d)) {
            t->nb[d] = 0;
            continue;
        }
        t->nb[d] = stride;
        stride *= t->ne[d] + (innermost ? pad : 0); /* padded rows: pad elements after each */
        innermost = false;
    }
    return af_tensor_span(t);
}

void af_case_tensor_dims(const af_case *c, af_tensor_id which, size_t *H, size_t *S, size_t *D) {
    *H = which == AF_Q ? c->q_heads : c->kv_heads;
    *S = which == AF_Q ? c->q_len : c->kv_len;
    *D = which == AF_V ? c->v_head_dim : c->head_dim;
}

/* Shape and strides of a tensor of spec s holding [B, H, S, D] canonically. */
static size_t af_spec_layout(const af_case *c, af_dtype dt, const af_tensor_spec *s, size_t H, size_t S, size_t D,
                             af_tensor *t) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = af_layout_shape(s->layout, c->batch, H, S, D, t->ne);
    uint32_t bdims = 0;
    int bd = af_layout_dim(s->layout, 'b'), hd = af_layout_dim(s->layout, 'h');
    if (s->bcast == AF_BCAST_BATCH && bd >= 0) bdims |= 1u << bd;
    if (s->bcast == AF_BCAST_HEADS && hd >= 0) bdims |= 1u << hd;
    return af_strides_for(t, s->perm % af_layout_perm_count(s->layout), s->pad, bdims);
}

size_t af_case_input_layout(const af_case *c, af_tensor_id which, af_tensor *t) {
    size_t H, S, D;
    af_case_tensor_dims(c, which, &H, &S, &D);
    return af_spec_layout(c, af_case_input_dtype(c, which), &c->t[af_case_is_packed(c) ? AF_Q : which], H, S, D, t);
}

size_t af_case_dout_layout(const af_case *c, af_tensor *t) {
    return af_spec_layout(c, c->dtype, &c->bwd.dout, c->q_heads, c->q_len, c->v_head_dim, t);
}

size_t af_case_dout_span(const af_case *c) {
    af_tensor t;
    return c->bwd.grads ? af_case_dout_layout(c, &t) : 0;
}

size_t af_case_input_span(const af_case *c, af_tensor_id which) {
    af_tensor t;
    return af_case_input_layout(c, which, &t);
}
