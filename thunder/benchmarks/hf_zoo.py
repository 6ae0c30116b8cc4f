"""A zoo of tiny random-config Hugging Face transformers models (no downloads) and their inputs, shared by
``thunder/tests/test_hf_models.py`` and ``benchmark_hf_models.py``: decoder-only (Llama, Qwen2, Mistral with a
sliding window, Phi-3, Gemma, GPT-2), encoder (BERT), encoder-decoder (T5, BART) and vision (ViT)."""

from __future__ import annotations

import torch
import transformers

_SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=128)

MODELS = {
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(num_key_value_heads=2, **_SMALL)),
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(num_key_value_heads=2, **_SMALL)),
    "mistral": lambda: transformers.MistralForCausalLM(
        transformers.MistralConfig(num_key_value_heads=2, sliding_window=4, **_SMALL)
    ),
    "phi3": lambda: transformers.Phi3ForCausalLM(
        transformers.Phi3Config(num_key_value_heads=2, pad_token_id=0, **_SMALL)
    ),
    "gemma": lambda: transformers.GemmaForCausalLM(
        transformers.GemmaConfig(num_key_value_heads=2, head_dim=8, **_SMALL)
    ),
    "gpt2": lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=128, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0
        )
    ),
    "bert": lambda: transformers.BertForMaskedLM(
        transformers.BertConfig(
            **_SMALL, max_position_embeddings=64, hidden_dropout_prob=0, attention_probs_dropout_prob=0
        )
    ),
    "t5": lambda: transformers.T5ForConditionalGeneration(
        transformers.T5Config(
            vocab_size=128,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            dropout_rate=0,
            decoder_start_token_id=0,
        )
    ),
    "bart": lambda: transformers.BartForConditionalGeneration(
        transformers.BartConfig(
            vocab_size=128,
            d_model=32,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=64,
            dropout=0,
            attention_dropout=0,
            activation_dropout=0,
        )  # fmt: skip
    ),
    "vit": lambda: transformers.ViTForImageClassification(
        transformers.ViTConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            image_size=16,
            patch_size=4,
            hidden_dropout_prob=0,
            attention_probs_dropout_prob=0,
        )  # fmt: skip
    ),
}
DECODERS = ["llama", "qwen2", "mistral", "phi3", "gemma", "gpt2"]


def model(name):
    """A fresh model of the zoo, its weights drawn from seed 0."""
    torch.manual_seed(0)
    return MODELS[name]()


def inputs(name, length, batch=2):
    """Keyword arguments of a forward: ``length`` tokens (pixels for ViT; T5 and BART also decode two fewer)."""
    ids = torch.randint(1, 128, (batch, length))
    if name == "vit":
        return dict(pixel_values=torch.randn(batch, 3, 16, 16))
    if name in ("t5", "bart"):
        return dict(input_ids=ids, decoder_input_ids=torch.randint(1, 128, (batch, max(length - 2, 1))))
    return dict(input_ids=ids)


def labels_for(name, kwargs):
    """Labels for a loss over the forward ``kwargs``."""
    if name == "vit":
        return torch.randint(0, 2, (kwargs["pixel_values"].shape[0],))
    return torch.randint(0, 128, kwargs.get("decoder_input_ids", kwargs.get("input_ids")).shape)
