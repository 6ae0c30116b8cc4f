"""Hugging Face transformers models under thunder.jit, against eager: forward passes across lengths, and decoding
with transformers' default cache (DynamicCache), whose layers and tensors the replay updates on every call.

Tiny random configurations, no downloads.
"""

import pytest
import torch

import thunder

transformers = pytest.importorskip("transformers")
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

CACHES = pytest.mark.parametrize("cache", ["symbolic values", "constant values"])


def tiny_llama():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


@CACHES
def test_decoding_with_the_default_cache(cache):
    """Prefill on an empty DynamicCache appends a layer and stores its tensors; each decode step extends every
    layer's tensors. 0.2.6 failed in the mask's vmap (the patch set crashed the process there, then refused the
    cache's `layers.append`). Under symbolic values one program serves every prompt length, one every decode step."""
    model = tiny_llama()
    jitted = thunder.jit(model, cache=cache)
    for prompt in (5, 7):
        ids = torch.randint(0, 128, (1, prompt))
        eager_cache, jit_cache = DynamicCache(), DynamicCache()
        with torch.no_grad():
            expected = model(input_ids=ids, past_key_values=eager_cache, use_cache=True)
            actual = jitted(input_ids=ids, past_key_values=jit_cache, use_cache=True)
            for _ in range(3):
                torch.testing.assert_close(actual.logits, expected.logits)
                assert actual.past_key_values is jit_cache and len(jit_cache.layers) == len(eager_cache.layers)
                for mine, theirs in zip(jit_cache.layers, eager_cache.layers):
                    torch.testing.assert_close(mine.keys, theirs.keys)
                    torch.testing.assert_close(mine.values, theirs.values)
                token = expected.logits[:, -1:].argmax(-1)
                expected = model(input_ids=token, past_key_values=eager_cache, use_cache=True)
                actual = jitted(input_ids=token, past_key_values=jit_cache, use_cache=True)
    if cache == "symbolic values":
        assert thunder.cache_misses(jitted) == 2  # a prefill, a decode step


@CACHES
def test_forward_across_lengths_and_batches(cache):
    model = tiny_llama()
    jitted = thunder.jit(model, cache=cache)
    with torch.no_grad():
        for batch, length in ((1, 5), (2, 9), (1, 3)):
            ids = torch.randint(0, 128, (batch, length))
            mask = torch.ones(batch, length, dtype=torch.long)
            mask[0, 0] = 0  # a padded token
            expected = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            torch.testing.assert_close(jitted(input_ids=ids, attention_mask=mask, use_cache=False).logits, expected)
    if cache == "symbolic values":
        # batch 1 and batch 2: broadcasting the padding mask's batch index decides on a size of 1 (as torch.compile
        # specializes sizes 0 and 1); the third call reuses the first program
        assert thunder.cache_misses(jitted) == 2


@CACHES
def test_the_cache_a_forward_makes_is_returned(cache):
    """With transformers' default use_cache=True and no cache given, the model makes a DynamicCache and returns
    it: 0.2.6 failed ("unhandled value of type DynamicCache"); the epilogue makes it anew on every call."""
    model = tiny_llama()
    jitted = thunder.jit(model, cache=cache)
    with torch.no_grad():
        for length in (5, 7):
            ids = torch.randint(0, 128, (1, length))
            expected, actual = model(input_ids=ids), jitted(input_ids=ids)
            torch.testing.assert_close(actual.logits, expected.logits)
            assert type(actual.past_key_values) is DynamicCache
            assert len(actual.past_key_values.layers) == len(expected.past_key_values.layers)
            for mine, theirs in zip(actual.past_key_values.layers, expected.past_key_values.layers):
                torch.testing.assert_close(mine.keys, theirs.keys)
                torch.testing.assert_close(mine.values, theirs.values)


def test_a_forward_without_mask_or_cache_compiles_per_batch_class():
    """Without a mask or a cache, transformers looks for packed sequences with torch.diff, a torch fallback in thunder
    that pinned the length (a compile per length); it is traced with symbolic sizes. Batch 1 and batch 2 stay two
    programs (the position ids' batch of 1 is broadcast, as torch.compile specializes a size of 1)."""
    model = tiny_llama()
    jitted = thunder.jit(model, cache="symbolic values")
    with torch.no_grad():
        for batch, length in ((2, 5), (2, 8), (1, 6), (1, 9)):
            ids = torch.randint(0, 128, (batch, length))
            expected = model(input_ids=ids, use_cache=False).logits
            torch.testing.assert_close(jitted(input_ids=ids, use_cache=False).logits, expected)
    assert thunder.cache_misses(jitted) == 2
