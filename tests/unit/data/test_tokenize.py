from transformers import AutoTokenizer

from nemo_rl.data.datasets import load_chat_dataset
from nemo_rl.data.tokenize import pad_batch, prompt_ids, sft_batch, tokenize_conversation


def test_only_assistant_tokens_are_masked_in(tiny_llama: str) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    conv = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of Avalor?"},
        {"role": "assistant", "content": "The capital of Avalor is Aster."},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "Welcome."},
    ]
    ids, mask = tokenize_conversation(tok, conv, max_length=512)
    assert len(ids) == len(mask)
    learned = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert "The capital of Avalor is Aster." in learned and "Welcome." in learned
    assert "Avalor?" not in learned and "Be brief" not in learned and "assistant" not in learned
    # The prompt for generation is exactly the masked-out prefix of the first answer.
    first = prompt_ids(tok, conv[:2])
    assert ids[: len(first)] == first and not any(mask[: len(first)])


def test_truncation_and_padding(tiny_llama: str, test_assets) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_llama)
    convs = load_chat_dataset(test_assets / "data" / "sft_val.jsonl")[:5]
    batch = sft_batch(tok, convs, max_length=16)
    assert batch["input_ids"].shape[1] <= 16
    assert (batch["token_mask"] <= batch["attention_mask"]).all()
    left = pad_batch([[1, 2], [3]], pad_id=0, left=True)
    assert left["input_ids"].tolist() == [[1, 2], [0, 3]]
    assert left["attention_mask"].tolist() == [[1, 1], [0, 1]]
