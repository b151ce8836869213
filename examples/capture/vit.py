"""A vision transformer from a tiny config (random weights): 32x32 images in 8x8 patches
(16 patches and the class token: 17 positions), 4 heads of 12, two layers, SDPA attention.

    attnfuzz capture -o captured/ -- python examples/capture/vit.py
"""
import torch
from transformers import ViTConfig, ViTModel

CONFIG = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=48, intermediate_size=96,
              num_hidden_layers=2, num_attention_heads=4)
BATCH = 2


def main():
    torch.manual_seed(0)
    model = ViTModel(ViTConfig(**CONFIG, attn_implementation="sdpa")).eval()
    with torch.no_grad():
        model(pixel_values=torch.randn(BATCH, 3, CONFIG["image_size"], CONFIG["image_size"]))


if __name__ == "__main__":
    main()
