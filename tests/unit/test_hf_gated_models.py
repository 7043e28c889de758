"""Gated Hugging Face models (run with --hf-gated).

Each test names its model in the marker: without the model in the local HF cache (and
without an HF_TOKEN that allows downloading it) the test skips with that name.
"""

import pytest

LLAMA = "meta-llama/Llama-3.2-1B"


@pytest.mark.hf_gated(LLAMA)
def test_llama_3_2_tokenizer_and_config_load() -> None:
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(LLAMA)
    assert config.model_type == "llama"
    assert config.vocab_size == 128256

    tokenizer = AutoTokenizer.from_pretrained(LLAMA)
    ids = tokenizer("The capital of France is Paris.")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id == 128000
    assert tokenizer.decode(ids, skip_special_tokens=True) == "The capital of France is Paris."
