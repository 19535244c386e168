"""mens.data.template: assistant labels from the model's own chat template (issue #12).

Real templates of five families (tests/data/fixtures/templates, provenance in its README),
rendered by jinja2 alone and checked against transformers' apply_chat_template; the tokenizer
is the embedded tiny one (mens/assets/tiny) with each family's special tokens added, so every
check runs offline in well under a second.
"""
from __future__ import annotations

import glob
import json
import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing

from mens.data.chat_template import CHATML
from mens.data.pack import IGNORE, tokenize_chat
from mens.data.template import ChatTemplate
from mens.errors import ConfigError, DataError

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "mens/assets/tiny"
FIXTURES = Path(__file__).parent / "fixtures/templates"

# Each family's template variables (as its tokenizer_config.json sets them) and the
# special tokens its tokenizer has (added to the tiny tokenizer so they stay one token).
FAMILIES = {
    "qwen3": ({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
              ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>"]),
    "llama3": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
               ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                "<|end_of_text|>"]),
    "mistral": ({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
                ["<s>", "</s>", "<unk>", "[INST]", "[/INST]"]),
    "gemma2": ({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
               ["<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>"]),
    "gemma3": ({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
               ["<bos>", "<eos>", "<pad>", "<start_of_turn>", "<end_of_turn>"]),
}
EOT = {"qwen3": "<|im_end|>", "llama3": "<|eot_id|>", "mistral": "</s>", "gemma2": "<end_of_turn>",
       "gemma3": "<end_of_turn>"}
ANSWERS = ["Hello! Vox has let-bindings: `let x = 1`.", "2 + 3 = 5, café ✓ — done."]
CHAT = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What does Vox have?"},
        {"role": "assistant", "content": ANSWERS[0]},
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": ANSWERS[1]}]


def template(family: str) -> ChatTemplate:
    variables, tokens = FAMILIES[family]
    return ChatTemplate((FIXTURES / f"{family}.jinja").read_text(), variables, tokens, family)


def tokenizer(family: str | None = None) -> Tokenizer:
    tok = Tokenizer.from_file(str(TINY / "tokenizer.json"))
    if family:
        tok.add_special_tokens(FAMILIES[family][1])
    return tok


def hf_tokenizer(family: str):
    """A transformers tokenizer carrying the family's template and special tokens."""
    from transformers import PreTrainedTokenizerFast
    variables, tokens = FAMILIES[family]
    tok = PreTrainedTokenizerFast(tokenizer_file=str(TINY / "tokenizer.json"), **variables,
                                  additional_special_tokens=tokens)
    tok.chat_template = (FIXTURES / f"{family}.jinja").read_text()
    return tok


def folded(messages):
    """What a template without a system role must see: the system text in the first user turn."""
    first = dict(messages[1], content=f"{messages[0]['content']}\n\n{messages[1]['content']}")
    return [first] + [dict(m) for m in messages[2:]]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_render_equals_transformers(family):
    tpl, hf = template(family), hf_tokenizer(family)
    chat = folded(CHAT) if family == "gemma2" else CHAT   # gemma2 raises on a system turn
    assert tpl.render(chat) == hf.apply_chat_template(chat, tokenize=False)
    for options in ({}, {"enable_thinking": False}):
        assert (tpl.render(chat[:4], True, options)
                == hf.apply_chat_template(chat[:4], tokenize=False, add_generation_prompt=True,
                                          **options))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_supervised_text_is_each_answer_plus_end_of_turn(family):
    rendered = template(family).render_spans(CHAT)
    assert [rendered.text[a:b] for a, b in rendered.spans] == [a + EOT[family] for a in ANSWERS]
    # the rendered text is the template's own (after folding, where the family needs it)
    hf = hf_tokenizer(family)
    want = CHAT if family in ("qwen3", "llama3", "gemma3") else folded(CHAT)
    assert rendered.text == hf.apply_chat_template(want, tokenize=False)
    assert "You are terse." in rendered.text   # no family loses the system prompt


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_label_tokens_are_the_answers(family):
    tok = tokenizer(family)
    ids, labels = template(family).encode(tok, CHAT)
    assert len(ids) == len(labels)
    runs, run = [], []
    for i, lab in zip(ids, labels):
        if lab != IGNORE:
            assert lab == i
            run.append(i)
        elif run:
            runs.append(run)
            run = []
    runs += [run] if run else []
    decoded = [tok.decode(r, skip_special_tokens=False) for r in runs]
    if family == "mistral":
        # `[/INST] ` + answer: byte-level BPE puts the space into a first word's token
        # (` Hello`), which straddles the span start and is supervised — the model must produce
        # that token; before a digit the space is a token of its own, outside the span
        assert decoded == [" " + ANSWERS[0] + "</s>", ANSWERS[1] + "</s>"]
    else:
        assert decoded == [a + EOT[family] for a in ANSWERS]


def test_qwen3_empty_think_block_is_not_supervised():
    rendered = template("qwen3").render_spans(CHAT)
    assert rendered.text.count("<think>\n\n</think>\n\n") == 1   # last assistant turn only
    assert rendered.text.endswith("<think>\n\n</think>\n\n" + ANSWERS[1] + "<|im_end|>\n")
    assert not any("<think>" in rendered.text[a:b] for a, b in rendered.spans)


@pytest.mark.parametrize("form", ["reasoning_content", "inline"])
def test_qwen3_reasoning_is_supervised(form):
    last = ({"role": "assistant", "content": ANSWERS[1], "reasoning_content": "2 plus 3 is 5."}
            if form == "reasoning_content" else
            {"role": "assistant", "content": f"<think>\n2 plus 3 is 5.\n</think>\n\n{ANSWERS[1]}"})
    chat = CHAT[:4] + [last]
    rendered = template("qwen3").render_spans(chat)
    assert rendered.text == hf_tokenizer("qwen3").apply_chat_template(chat, tokenize=False)
    assert [rendered.text[a:b] for a, b in rendered.spans] == [
        ANSWERS[0] + "<|im_end|>",
        f"<think>\n2 plus 3 is 5.\n</think>\n\n{ANSWERS[1]}<|im_end|>"]


def test_reasoning_inline_in_a_template_without_think_support_is_plain_content():
    content = f"<think>\nfirst add.\n</think>\n\n{ANSWERS[1]}"
    chat = CHAT[:4] + [{"role": "assistant", "content": content}]
    rendered = template("llama3").render_spans(chat)
    assert rendered.text[slice(*rendered.spans[-1])] == content + "<|eot_id|>"


@pytest.mark.parametrize("family,why", [("gemma2", "refuses"), ("mistral", "drops")])
def test_system_prompt_folded_with_a_note(family, why):
    tpl = template(family)
    rendered = tpl.render_spans(CHAT)
    assert rendered.note and why in rendered.note and "first user turn" in rendered.note
    notes = set()
    tpl.encode(tokenizer(family), CHAT, notes=notes)
    assert notes == {rendered.note}
    # serving folds the same way: the prompt is the training text's prefix up to the answer
    prompt = tpl.prompt_text(CHAT[:4])
    assert prompt == hf_tokenizer(family).apply_chat_template(folded(CHAT[:4]), tokenize=False,
                                                              add_generation_prompt=True)
    assert rendered.text.startswith(prompt.removesuffix("<start_of_turn>model\n"))


@pytest.mark.parametrize("family", ["qwen3", "llama3", "gemma3"])
def test_templates_with_a_system_role_fold_nothing(family):
    assert template(family).render_spans(CHAT).note is None


def test_qwen3_prompt_matches_training_prefix_with_thinking_off():
    tpl, options = template("qwen3"), {"enable_thinking": False}
    prompt = tpl.prompt_text(CHAT[:4], options)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    text, spans, *_ = tpl.render_spans(CHAT, options)
    assert text[:spans[-1][0]] == prompt   # what the model saw before its answer, at both times


def test_template_refusing_a_record_is_a_data_error():
    bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(DataError, match="alternate"):
        template("gemma3").render_spans(bad)


def test_bos_is_not_doubled():
    tok = tokenizer("llama3")
    bos = tok.token_to_id("<|begin_of_text|>")
    # a tokenizer that adds BOS itself (as Llama 3's does) must not add a second one
    tok.post_processor = TemplateProcessing(single="<|begin_of_text|> $A",
                                            special_tokens=[("<|begin_of_text|>", bos)])
    ids, labels = template("llama3").encode(tok, CHAT)
    assert ids[0] == bos and ids.count(bos) == 1 and labels[0] == IGNORE


def corpus_chats() -> list[list[dict]]:
    files = sorted(glob.glob(str(ROOT / "mens/assets/corpora/vox_lang/*.jsonl")))
    recs = [json.loads(line) for f in files for line in open(f, encoding="utf-8") if line.strip()]
    return [r["messages"] for r in recs if "messages" in r]


def test_tiny_chatml_gives_tokenize_chat_ids_and_labels():
    """The embedded tiny rung's own template (ChatML) reproduces today's tokenize_chat exactly
    on every shipped vox_lang chat: switching to templates does not move existing training."""
    tok, tpl = tokenizer(), ChatTemplate.load(TINY)
    assert tpl.source == CHATML
    chats = corpus_chats()
    assert len(chats) > 300
    for messages in chats:
        assert tpl.encode(tok, messages) == tokenize_chat(tok, messages)
    s1, s2 = {}, {}
    for messages in chats[:40]:
        assert tpl.encode(tok, messages, 200, stats=s1) == tokenize_chat(tok, messages, 200, s2)
    assert s1 == s2 and s1["truncated_records"] > 0


def test_encode_speed_against_tokenize_chat(capsys):
    """Timing for the report (no timed assertion: machines vary); the outputs must agree."""
    tok, tpl = tokenizer(), ChatTemplate.load(TINY)
    chats = (corpus_chats() * 2)[:500]
    t0 = time.perf_counter()
    old = [tokenize_chat(tok, m) for m in chats]
    t1 = time.perf_counter()
    new = [tpl.encode(tok, m) for m in chats]
    t2 = time.perf_counter()
    assert new == old
    with capsys.disabled():
        print(f"\n500 chats: tokenize_chat {t1 - t0:.3f}s, template encode {t2 - t1:.3f}s "
              f"({(t2 - t1) / (t1 - t0):.2f}x)")


# ---- loading -------------------------------------------------------------------------------

def write_model(d: Path, config: dict, files: dict | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    for name, text in (files or {}).items():
        (d / name).write_text(text)
    return d


def test_load_reads_the_model_files(tmp_path):
    gemma = (FIXTURES / "gemma3.jinja").read_text()
    d = write_model(tmp_path / "m", {
        "chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": gemma}],
        "bos_token": {"content": "<bos>", "lstrip": False}, "eos_token": "<eos>",
        "added_tokens_decoder": {"1": {"content": "<start_of_turn>"}, "2": {"content": "<end_of_turn>"}}})
    tpl = ChatTemplate.load(d)
    assert tpl.source == gemma and tpl.variables == {"bos_token": "<bos>", "eos_token": "<eos>"}
    assert tpl.render_spans(CHAT).text.startswith("<bos><start_of_turn>user\nYou are terse.")
    assert [tpl.render_spans(CHAT).text[a:b] for a, b in tpl.render_spans(CHAT).spans][0].endswith(
        "<end_of_turn>")
    (d / "chat_template.jinja").write_text(CHATML)   # the newer file layout wins
    assert ChatTemplate.load(d).source == CHATML


def test_override_by_name_or_file(tmp_path):
    d = write_model(tmp_path / "m", {"eos_token": "<|im_end|>"})
    assert ChatTemplate.load(d, "chatml").source == CHATML
    f = tmp_path / "mine.jinja"
    f.write_text((FIXTURES / "llama3.jinja").read_text())
    assert ChatTemplate.load(d, str(f)).origin == str(f)
    with pytest.raises(ConfigError) as e:
        ChatTemplate.load(d, "no-such-template")
    assert e.value.key == "data.chat_template"


def test_model_without_template_needs_data_chat_template(tmp_path):
    d = write_model(tmp_path / "base", {"eos_token": "</s>"})
    with pytest.raises(ConfigError) as e:
        ChatTemplate.load(d)
    assert e.value.key == "data.chat_template" and e.value.code == 2
    assert "no chat template" in e.value.message and "data.chat_template=chatml" in e.value.message
