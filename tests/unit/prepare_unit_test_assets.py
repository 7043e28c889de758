"""Build every asset the unit and functional tests use, offline.

    uv run tests/unit/prepare_unit_test_assets.py [--force] [--out DIR]

Makes, under tests/unit/test_assets/ (git-ignored):
  tokenizer/     a byte-level BPE trained here with `tokenizers`, with a chat template
  tiny_llama/    a Llama config with random weights, saved with save_pretrained (+ tokenizer)
  tiny_qwen2/    the same for Qwen2
  tiny_llama_tied/, tiny_qwen3/, tiny_gemma3/, tiny_nemotron5_h/
                 the same for the other tiny models upstream NeMo RL's tests use (Llama with
                 tied embeddings, Qwen3, Gemma 3, Nemotron-H's Mamba/attention/MLP hybrid)
  data/          sft_{train,val}.jsonl (chat), math_{train,val}.jsonl (problems + answers)
                 and math_sft_{train,val}.jsonl (the math problems as chat, for SFT warm-up)

Idempotent: what is there and complete is reused (a second run takes about a second);
--force rebuilds everything. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path(__file__).resolve().parent / "test_assets"
VOCAB_SIZE = 1024
SEED = 1234
SPECIAL_TOKENS = ["<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Tiny models, each saved as test_assets/tiny_<family>/ with the tokenizer above. The first two
# are this project's own; the others are those upstream NeMo RL's tests build (its
# tiny_<family>_model_path fixtures), here with random weights and the local tokenizer.
MODELS = ("llama", "qwen2", "llama_tied", "qwen3", "gemma3", "nemotron5_h")
MATH_PROMPT = "Compute {a} {op} {b}. Put the final answer in \\boxed{{}}."

# Made-up facts so the SFT set is learnable from its own content, not from pretraining.
COUNTRIES = [
    "Avalor",
    "Brindle",
    "Corvania",
    "Dunmore",
    "Elbrea",
    "Fallow",
    "Gorse",
    "Hestia",
    "Ivel",
    "Jorund",
    "Kestra",
    "Lumen",
    "Morrow",
    "Norvik",
    "Ostra",
    "Pellam",
]
CAPITALS = [
    "Aster",
    "Brook",
    "Cinder",
    "Dale",
    "Ember",
    "Fen",
    "Glen",
    "Holt",
    "Isle",
    "Jade",
    "Keel",
    "Loft",
    "Marsh",
    "Nook",
    "Orchard",
    "Pike",
]
COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white"]
ANIMALS = ["cat", "dog", "fox", "owl", "bee", "elk", "yak", "emu"]


def _math_items(rng: random.Random, n: int) -> list[dict[str, str]]:
    items = []
    for _ in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        op = rng.choice(["+", "+", "-"])
        if op == "-" and b > a:
            a, b = b, a
        answer = a + b if op == "+" else a - b
        items.append({"problem": MATH_PROMPT.format(a=a, op=op, b=b), "answer": str(answer)})
    return items


def _sft_conversation(rng: random.Random) -> dict[str, Any]:
    kind = rng.randrange(4)
    if kind == 0:
        i = rng.randrange(len(COUNTRIES))
        q, a = f"What is the capital of {COUNTRIES[i]}?", f"The capital of {COUNTRIES[i]} is {CAPITALS[i]}."
    elif kind == 1:
        word = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 6)))
        q, a = f"Repeat the word {word} twice.", f"{word} {word}"
    elif kind == 2:
        i = rng.randrange(len(ANIMALS))
        q, a = f"Which color is the {ANIMALS[i]}?", f"The {ANIMALS[i]} is {COLORS[i]}."
    else:
        item = _math_items(rng, 1)[0]
        q, a = item["problem"], f"The answer is \\boxed{{{item['answer']}}}."
    messages = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    if rng.random() < 0.3:
        messages.insert(0, {"role": "system", "content": "You are a concise assistant."})
    return {"messages": messages}


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def build_data(out: Path) -> None:
    rng = random.Random(SEED)
    out.mkdir(parents=True, exist_ok=True)
    _write_jsonl(out / "sft_train.jsonl", [_sft_conversation(rng) for _ in range(2000)])
    _write_jsonl(out / "sft_val.jsonl", [_sft_conversation(rng) for _ in range(200)])
    _write_jsonl(out / "math_train.jsonl", _math_items(rng, 2000))
    _write_jsonl(out / "math_val.jsonl", _math_items(rng, 200))
    # The math problems as chat, for a short SFT warm-up before GRPO.
    for split, n in (("train", 2000), ("val", 200)):
        rows = [
            {
                "messages": [
                    {"role": "user", "content": m["problem"]},
                    {"role": "assistant", "content": f"The answer is \\boxed{{{m['answer']}}}."},
                ]
            }
            for m in _math_items(rng, n)
        ]
        _write_jsonl(out / f"math_sft_{split}.jsonl", rows)


def _corpus(data_dir: Path) -> Iterator[str]:
    for name in ("sft_train.jsonl", "math_train.jsonl"):
        for line in (data_dir / name).read_text().splitlines():
            row = json.loads(line)
            for m in row.get("messages", []):
                yield m["content"]
            if "problem" in row:
                yield row["problem"]
    # Varied filler so BPE reaches the vocabulary size with ordinary English pieces.
    rng = random.Random(SEED + 1)
    words = (
        COUNTRIES
        + CAPITALS
        + COLORS
        + ANIMALS
        + "the of and to in is it you that he was for on are "
        "with as his they be at one have this from or had by word but what some we can out other "
        "were all there when up use your how said an each she which do their time if will way "
        "about many then them write would like so these her long make thing see him two has look "
        "more day could go come did number sound no most people my over know water than call "
        "first who may down side been now find any new work part take get place made live where "
        "after back little only round man year came show every good me give our under name very "
        "through just form sentence great think say help low line differ turn cause much mean "
        "before move right boy old too same tell does set three want air well also play small "
        "end put home read hand port large spell add even land here must big high such follow "
        "act why ask men change went light kind off need house picture try us again animal point "
        "mother world near build self earth father head stand own page should country found "
        "answer school grow study still learn plant cover food sun four between state keep eye "
        "never last let thought city tree cross farm hard start might story saw far sea draw "
        "left late run while press close night real life few north compute final boxed put".split()
    )
    for _ in range(3000):
        yield " ".join(rng.choice(words) for _ in range(12)) + f" {rng.randint(0, 999)}."


def build_tokenizer(out: Path, data_dir: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Digits split one by one so arithmetic answers are a single token per digit.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(data_dir), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<|pad|>",
        eos_token="<|im_end|>",
        bos_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    fast.save_pretrained(str(tmp))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _tiny_config(family: str, vocab_size: int, pad_id: int, eos_id: int, bos_id: int) -> Any:
    """A 2-3 layer config of `family` (MODELS) with this tokenizer's vocabulary and special ids."""
    from transformers import Gemma3TextConfig, LlamaConfig, NemotronHConfig, Qwen2Config, Qwen3Config

    common: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=bos_id,
    )
    if family == "llama":
        return LlamaConfig(**common)
    if family == "llama_tied":
        return LlamaConfig(**{**common, "tie_word_embeddings": True})
    if family == "qwen2":
        return Qwen2Config(**common)
    if family == "qwen3":
        return Qwen3Config(**common, head_dim=32)
    if family == "gemma3":  # Gemma 3 ties its embeddings
        return Gemma3TextConfig(**{**common, "tie_word_embeddings": True}, head_dim=32)
    if family == "nemotron5_h":  # one Mamba-2, one attention and one MLP layer ("M*-")
        return NemotronHConfig(  # type: ignore[call-arg]  # transformers 5: an alias of layers_block_type
            **{**common, "num_hidden_layers": 3},
            hybrid_override_pattern="M*-",
            head_dim=32,
            mamba_num_heads=8,
            mamba_head_dim=16,
            n_groups=1,
            ssm_state_size=16,
        )
    raise ValueError(f"unknown model family {family!r} (one of {', '.join(MODELS)})")


def build_model(out: Path, family: str, tokenizer_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    torch.manual_seed(SEED)
    config = _tiny_config(
        family, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id
    )
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _complete(path: Path, marker: str) -> bool:
    return (path / marker).exists()


def prepare(out: Path = DEFAULT_OUT, force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Build whatever is missing under `out` (everything with force); return `out`.

    One process builds at a time (a lock file in `out`): xdist workers of a fresh clone
    all ask for the assets at once, and the later ones then find them complete."""
    from filelock import FileLock

    out.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out / ".lock")):
        return _prepare_locked(out, force, log)


def _prepare_locked(out: Path, force: bool, log: Callable[[str], None]) -> Path:
    steps: list[tuple[Path, str, Callable[[], None]]] = [
        (out / "data", "math_sft_val.jsonl", lambda: build_data(out / "data")),
        (out / "tokenizer", "tokenizer.json", lambda: build_tokenizer(out / "tokenizer", out / "data")),
    ]
    for family in MODELS:
        model_dir = out / f"tiny_{family}"
        steps.append((model_dir, "model.safetensors", partial(build_model, model_dir, family, out / "tokenizer")))
    for path, marker, build in steps:
        if not force and _complete(path, marker):
            log(f"[assets] reuse  {path.relative_to(out.parent)}")
            continue
        t0 = time.perf_counter()
        build()
        log(f"[assets] built  {path.relative_to(out.parent)} ({time.perf_counter() - t0:.1f} s)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--force", action="store_true", help="rebuild every asset")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    args = parser.parse_args(argv)
    prepare(args.out, force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
