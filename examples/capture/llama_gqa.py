"""A Llama-style decoder from a tiny config (random weights, nothing downloaded): 8 query
heads over 2 key/value heads (GQA 4:1), head_dim 8, two layers, SDPA attention. Two
forwards: a batch without padding (causal through is_causal) and a right-padded batch
(causal and padding in one boolean mask).

    attnfuzz capture -o captured/ -- python examples/capture/llama_gqa.py
"""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=2, max_position_embeddings=64)
BATCH, SEQ, VALID = 2, 12, (12, 9)


def main():
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG, attn_implementation="sdpa")).eval()
    ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ))
    pad = torch.tensor([[1] * n + [0] * (SEQ - n) for n in VALID])
    with torch.no_grad():
        model(input_ids=ids)
        model(input_ids=ids, attention_mask=pad)


if __name__ == "__main__":
    main()
