import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from nemo_rl.data.tokenize import pad_batch, prompt_ids
from nemo_rl.models.generation.hf_sampler import generate

CFG = {"max_new_tokens": 8, "temperature": 1.0, "top_p": 0.9, "seed": 3}


def _setup(path: str):
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    prompts = [prompt_ids(tok, [{"role": "user", "content": q}]) for q in ("Compute 1 + 2.", "Hi")]
    return tok, model, prompts


def test_seeded_sampling_is_deterministic(tiny_llama: str) -> None:
    tok, model, prompts = _setup(tiny_llama)
    batch = pad_batch(prompts, tok.pad_token_id, left=True)
    a = generate(model, batch["input_ids"], batch["attention_mask"], CFG, [tok.eos_token_id], tok.pad_token_id)
    b = generate(model, batch["input_ids"], batch["attention_mask"], CFG, [tok.eos_token_id], tok.pad_token_id)
    c = generate(
        model, batch["input_ids"], batch["attention_mask"], dict(CFG, seed=4), [tok.eos_token_id], tok.pad_token_id
    )
    assert torch.equal(a["output_ids"], b["output_ids"])
    assert not torch.equal(a["output_ids"], c["output_ids"])
    assert a["stop_reasons"] == b["stop_reasons"] and set(a["stop_reasons"]) <= {"stop", "length"}


def test_left_padding_does_not_change_greedy_output(tiny_llama: str) -> None:
    tok, model, prompts = _setup(tiny_llama)
    greedy = dict(CFG, temperature=0.0)
    batch = pad_batch(prompts, tok.pad_token_id, left=True)
    together = generate(
        model, batch["input_ids"], batch["attention_mask"], greedy, [tok.eos_token_id], tok.pad_token_id
    )
    short = pad_batch([prompts[1]], tok.pad_token_id, left=True)
    alone = generate(model, short["input_ids"], short["attention_mask"], greedy, [tok.eos_token_id], tok.pad_token_id)
    p = together["prompt_length"]
    n = alone["output_ids"].shape[1] - alone["prompt_length"]
    assert torch.equal(together["output_ids"][1, p : p + n], alone["output_ids"][0, alone["prompt_length"] :])
    # Recorded logprobs equal a fresh forward pass over the sampled sequence.
    ids, attn = together["output_ids"], torch.cat([batch["attention_mask"], together["response_mask"][:, p:].long()], 1)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits
    lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    m = together["response_mask"][:, 1:].bool()
    assert torch.allclose(lp[m], together["logprobs"][:, 1:][m], atol=1e-4)
