"""The embedded tiny rung (mens/assets/tiny, built by `python tools/tiny_base.py`): it loads
offline, matches conf/rung/tiny.yaml and its checksums, tokenizes like Qwen2/Qwen3, speaks ChatML,
and is actually pretrained."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "mens" / "assets" / "tiny"
SPECIALS = {"<|endoftext|>": 4093, "<|im_start|>": 4094, "<|im_end|>": 4095}

TRICKY = [
    "I'm sure it's fine, they'll say we've done what you'd do. DON'T SHOUT'S",
    "12345 + 6.78 = 12351.78; 2026-11-30T10:00:00Z, 0x1F, 1e-6",
    "Ünïcödé naïve café — “quotes” … résumé, Ελληνικά, русский, emoji 🙂👍🏽",
    "def f(x):\n    if x:\n\t\treturn x  # two spaces\n\n\n    return None\r\n",
    "    leading spaces\n  \n\ttabs\t\tand trailing   ",
    "中文分词测试：你好，世界！日本語のテキスト。한국어 문장.",
    "let v = vox::parse(\"{a: [1, 2]}\")?;\n} else {\n    $ ls -la | grep '.py' >> out.txt",
]
HELDOUT = '''"""Helpers for reading small configuration files.

Each function takes a path and returns a dictionary; missing files give an empty result.
"""
import os


def read_pairs(path, sep="="):
    """Return the key/value pairs of a simple configuration file as a dict."""
    result = {}
    if not os.path.exists(path):
        return result
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition(sep)
            result[key.strip()] = value.strip()
    return result


class Cache:
    """A mapping that remembers the values it has computed."""

    def __init__(self, func):
        self.func = func
        self.data = {}

    def get(self, key):
        if key not in self.data:
            self.data[key] = self.func(key)
        return self.data[key]
'''


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TINY), local_files_only=True)


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(TINY), local_files_only=True).eval()


def test_files_and_checksums():
    lines = (TINY / "SHA256SUMS").read_text().splitlines()
    sums = dict(reversed(line.split("  ", 1)) for line in lines)
    assert set(sums) == {f.name for f in TINY.iterdir()} - {"SHA256SUMS"}
    for name, digest in sums.items():
        assert hashlib.sha256((TINY / name).read_bytes()).hexdigest() == digest, name
    assert (TINY / "model.safetensors").stat().st_size < 10 * 2**20


def test_architecture_matches_rung(model):
    from omegaconf import OmegaConf

    from mens.plan.memory import Arch

    rung = OmegaConf.load(ROOT / "conf" / "rung" / "tiny.yaml")
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == Arch.of(rung).params()["total"]
    c = model.config
    assert (c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
            c.num_key_value_heads, c.head_dim, c.vocab_size, c.tie_word_embeddings,
            c.max_position_embeddings) == (
        rung.hidden_size, rung.intermediate_size, rung.num_hidden_layers,
        rung.num_attention_heads, rung.num_key_value_heads, rung.head_dim, rung.vocab_size,
        rung.tie_word_embeddings, rung.max_position_embeddings)
    assert c.rope_parameters["rope_theta"] == 1e6 and c.rms_norm_eps == 1e-6
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize("text", TRICKY)
def test_pretokenizer_is_qwen2(tok, text):
    """The split equals Qwen2's regex (transformers' own copy) applied with `regex`, so a GGUF
    export may declare pre=qwen2."""
    import regex
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    backend = tok.backend_tokenizer
    assert backend.normalizer is None
    split = json.loads(backend.to_str())["pre_tokenizer"]["pretokenizers"][0]
    assert split["pattern"]["Regex"] == PRETOKENIZE_REGEX and split["behavior"] == "Isolated"
    pieces = backend.pre_tokenizer.pre_tokenize_str(text)
    assert [text[a:b] for _, (a, b) in pieces] == regex.findall(PRETOKENIZE_REGEX, text)


def test_special_tokens(tok):
    assert len(tok) == 4096
    for s, i in SPECIALS.items():
        assert tok.convert_tokens_to_ids(s) == i
        assert tok.encode(s, add_special_tokens=False) == [i]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.encode("a<|im_start|>user\nb<|im_end|>", add_special_tokens=False).count(4094) == 1


def test_chat_template_is_chatml(tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"},
            {"role": "assistant", "content": "Hello.\n  Indented."}]
    want = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n"
            "<|im_start|>assistant\nHello.\n  Indented.<|im_end|>\n")
    assert tok.apply_chat_template(msgs, tokenize=False) == want
    assert tok.apply_chat_template(msgs[:2], tokenize=False, add_generation_prompt=True) == (
        want.split("<|im_start|>assistant")[0] + "<|im_start|>assistant\n")
    ids = tok.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"]
    assert list(ids) == tok.encode(want, add_special_tokens=False)


@pytest.mark.parametrize("text", TRICKY + [HELDOUT, "", " ", "\n\n", "a" * 300])
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_greedy_generation_runs(tok, model):
    import torch

    prompt = tok.apply_chat_template([{"role": "user", "content": "Write a function."}],
                                     tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tok.encode(prompt, add_special_tokens=False)])
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > ids.shape[1] and int(out.max()) < 4096
    again = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert torch.equal(out, again)


def test_base_is_pretrained(tok, model):
    """Held-out general text (written for this test, not in the corpus): an untrained model sits
    at ln(4096) = 8.32 nats per token; the pretrained base must be far below."""
    import torch

    ids = torch.tensor([tok.encode(HELDOUT, add_special_tokens=False)])
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss.item()
    assert loss < 0.6 * math.log(4096), loss
