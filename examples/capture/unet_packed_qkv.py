"""A UNet from a tiny diffusers config (random weights) whose self-attention projects Q, K
and V in one 1x1 convolution over channel-first features and splits the packed result
with chunk(3, dim=1) -- the attention block of issue reports where TensorRT gave NaN on
the split packed QKV. Cross-attention keeps diffusers' AttnProcessor2_0 (Q from the
image, K and V from 7 text tokens).

Shapes from the config: a 16x16 latent, CrossAttnDownBlock2D at 16x16 (256 positions,
32 channels), the mid block at 8x8 (64 positions, 64 channels), CrossAttnUpBlock2D at
16x16; `attention_head_dim` (diffusers' legacy name) is the number of heads: 4.

    attnfuzz capture -o captured/ -- python examples/capture/unet_packed_qkv.py
"""
import torch
import torch.nn.functional as F
from diffusers import UNet2DConditionModel
from diffusers.models.attention_processor import AttnProcessor2_0

CONFIG = dict(sample_size=16, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
              down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
              up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32, attention_head_dim=4,
              norm_num_groups=8)
BATCH, TEXT = 2, 7


class PackedChannelFirstProcessor:
    """Self-attention through one packed projection: x [B, S, C] -> [B, C, S] -> 1x1 conv
    to [B, 3C, S] -> chunk(3, dim=1) -> per tensor [B, heads, D, S] viewed as
    [B, heads, S, D] (the layout qkv_channels_first)."""

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None, **kw):
        B, S, C = hidden_states.shape
        w = torch.cat([attn.to_q.weight, attn.to_k.weight, attn.to_v.weight])[:, :, None]
        qkv = F.conv1d(hidden_states.transpose(1, 2), w)  # [B, 3C, S]
        heads, D = attn.heads, C // attn.heads
        q, k, v = (t.reshape(B, heads, D, S).transpose(-1, -2) for t in qkv.chunk(3, dim=1))
        out = F.scaled_dot_product_attention(q, k, v)
        out = out.transpose(1, 2).reshape(B, S, C)
        return attn.to_out[1](attn.to_out[0](out))


def build():
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**CONFIG).eval()
    unet.set_attn_processor({name: PackedChannelFirstProcessor() if name.endswith("attn1.processor")
                             else AttnProcessor2_0() for name in unet.attn_processors})
    return unet


def main():
    unet = build()
    sample = torch.randn(BATCH, 4, CONFIG["sample_size"], CONFIG["sample_size"])
    text = torch.randn(BATCH, TEXT, CONFIG["cross_attention_dim"])
    with torch.no_grad():
        unet(sample, 10, encoder_hidden_states=text)


if __name__ == "__main__":
    main()
