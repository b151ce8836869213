"""A BERT-style encoder from a tiny config (random weights): 4 heads of 8, two layers,
SDPA attention, a padded batch (10 and 6 valid tokens): the padding mask, no causality.

    attnfuzz capture -o captured/ -- python examples/capture/bert_padding.py
"""
import torch
from transformers import BertConfig, BertModel

CONFIG = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=32)
SEQ, VALID = 10, (10, 6)


def main():
    torch.manual_seed(0)
    model = BertModel(BertConfig(**CONFIG, attn_implementation="sdpa")).eval()
    ids = torch.randint(0, CONFIG["vocab_size"], (len(VALID), SEQ))
    mask = torch.tensor([[1] * n + [0] * (SEQ - n) for n in VALID])
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)


if __name__ == "__main__":
    main()
