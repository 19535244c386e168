"""Tiny random models of every supported family, each with a tokenizer carrying the family's
special tokens, BOS and chat template (mens's byte-level BPE underneath): built by the export and
the `+rung=hf` tests."""
from __future__ import annotations

import json
from pathlib import Path

from mens.resources import ASSETS

QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
          "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
          "{{- '<|im_start|>assistant\\n' }}{%- endif %}")
LLAMA3 = ("{{- bos_token }}{%- for m in messages %}{{- '<|start_header_id|>' + m['role'] + "
          "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
          "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>"
          "\\n\\n' }}{%- endif %}")
# Gemma 3's chat template (system folded into the first user turn, assistant called "model")
GEMMA = ("{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = "
         "messages[0]['content'] + '\\n\\n' -%}{%- set loop_messages = messages[1:] -%}"
         "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}"
         "{%- endif -%}{%- for message in loop_messages -%}{%- if message['role'] == 'assistant' "
         "-%}{%- set role = 'model' -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
         "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') + "
         "message['content'] | trim + '<end_of_turn>\\n' }}{%- endfor -%}"
         "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}")
MISTRAL = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}"
           "{{ '[INST] ' + m['content'] + '\\n\\n' }}{% elif m['role'] == 'user' %}"
           "{% if not (loop.index0 == 1 and messages[0]['role'] == 'system') %}{{ '[INST] ' }}"
           "{% endif %}{{ m['content'] + '[/INST]' }}{% else %}{{ m['content'] + eos_token }}"
           "{% endif %}{% endfor %}")
# gpt-oss's harmony format, reduced to its turns (no channels): <|start|>role<|message|>…<|end|>
HARMONY_SPECIALS = ["<|endoftext|>", "<|start|>", "<|message|>", "<|end|>", "<|return|>",
                    "<|channel|>"]
HARMONY = ("{%- for m in messages %}{{- '<|start|>' + m['role'] + '<|message|>' + m['content'] "
           "+ '<|end|>' }}{%- endfor %}{%- if add_generation_prompt %}"
           "{{- '<|start|>assistant' }}{%- endif %}")
# Phi-3's format: <|user|>\n…<|end|>\n<|assistant|>\n
PHI3_SPECIALS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
PHI3 = ("{%- for m in messages %}{{- '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}")
DELTANET = dict(layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                linear_conv_kernel_dim=4)
# family: (config class, config kwargs, specials, bos, eos, pad, chat template, Llama 3 regex)
SMALL = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.1)
FAMILIES = {
    "qwen2": ("Qwen2Config", dict(SMALL, tie_word_embeddings=True), QWEN_SPECIALS, None,
              "<|im_end|>", "<|endoftext|>", CHATML, False),
    "qwen3": ("Qwen3Config", dict(SMALL, head_dim=64, tie_word_embeddings=False), QWEN_SPECIALS,
              None, "<|im_end|>", "<|endoftext|>", CHATML, False),
    "llama": ("LlamaConfig", dict(SMALL, tie_word_embeddings=False, rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
        high_freq_factor=4.0, original_max_position_embeddings=8192)),
        ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
         "<|eot_id|>"], "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>", LLAMA3, True),
    "mistral": ("MistralConfig", dict(SMALL, head_dim=32, sliding_window=None,
                                      tie_word_embeddings=False),
                ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"], "<s>", "</s>", "<unk>", MISTRAL,
                False),
    # sliding windows of 8 tokens, shorter than the prompts: llama.cpp must apply them alike
    "gemma2": ("Gemma2Config", dict(SMALL, head_dim=32, query_pre_attn_scalar=32,
                                    sliding_window=8, hidden_activation="gelu_pytorch_tanh"),
               ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"], "<bos>",
               "<end_of_turn>", "<pad>", GEMMA, False),
    "gemma3_text": ("Gemma3TextConfig", dict(SMALL, num_hidden_layers=6, num_key_value_heads=1,
                                             head_dim=32, query_pre_attn_scalar=32,
                                             sliding_window=8),
                    ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"], "<bos>",
                    "<end_of_turn>", "<pad>", GEMMA, False),
    # kv heads < heads: q_norm (heads·d) and k_norm (kv·d) differ in width, as the count says
    "olmo2": ("Olmo2Config", dict(SMALL, tie_word_embeddings=False, eos_token_id=None,
                                  pad_token_id=None), QWEN_SPECIALS, None, "<|im_end|>",
              "<|endoftext|>", CHATML, False),
    # mixtures of experts: 4 experts, 2 routed per token, each expert's MLP narrower
    # (top-k weights renormalised, as Qwen3-30B-A3B's config.json says and llama.cpp computes)
    "qwen3_moe": ("Qwen3MoeConfig", dict(SMALL, head_dim=32, num_experts=4,
                                         num_experts_per_tok=2, moe_intermediate_size=64,
                                         norm_topk_prob=True, tie_word_embeddings=False),
                  QWEN_SPECIALS, None, "<|im_end|>", "<|endoftext|>", CHATML, False),
    "mixtral": ("MixtralConfig", dict(SMALL, num_local_experts=4, num_experts_per_tok=2,
                                      sliding_window=None, tie_word_embeddings=False),
                ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"], "<s>", "</s>", "<unk>", MISTRAL,
                False),
    # sliding windows of 8 tokens on alternate layers (gpt-oss's layer_types), attention sinks
    # gpt-oss-20b's yarn rope (max_position_embeddings = factor 32 x original 4096) but with
    # truncate=true, what llama.cpp computes: the published truncate=false parts from it
    # (tests/export/test_families_gguf.py measures by how much)
    "gpt_oss": ("GptOssConfig", dict(SMALL, head_dim=32, num_local_experts=4,
                                     num_experts_per_tok=2, sliding_window=8,
                                     max_position_embeddings=131072, rope_parameters=dict(
                                         rope_type="yarn", rope_theta=150000.0, factor=32.0,
                                         beta_fast=32.0, beta_slow=1.0, truncate=True,
                                         original_max_position_embeddings=4096),
                                     tie_word_embeddings=False, eos_token_id=None,
                                     pad_token_id=None), HARMONY_SPECIALS, None, "<|return|>",
                "<|endoftext|>", HARMONY, False),
    "phi3": ("Phi3Config", dict(SMALL, tie_word_embeddings=False, bos_token_id=None,
                                eos_token_id=None, pad_token_id=None), PHI3_SPECIALS, None,
             "<|end|>", "<|endoftext|>", PHI3, False),
    # one Gated DeltaNet (linear-attention) layer, then one gated full-attention layer
    "qwen3_5_text": ("Qwen3_5TextConfig", dict(SMALL, head_dim=32, **DELTANET,
                                               tie_word_embeddings=False), QWEN_SPECIALS, None,
                     "<|im_end|>", "<|endoftext|>", CHATML, False),
    "qwen3_5_moe_text": ("Qwen3_5MoeTextConfig", dict(SMALL, head_dim=32, **DELTANET,
                                                      num_experts=4, num_experts_per_tok=2,
                                                      moe_intermediate_size=64,
                                                      shared_expert_intermediate_size=64,
                                                      tie_word_embeddings=False),
                         QWEN_SPECIALS, None, "<|im_end|>", "<|endoftext|>", CHATML, False),
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# family: its real instruct chat template with tools (tests/data/fixtures/templates, provenance
# in its README), for the tool-call tests; make_tokenizer(..., chat_template=tool_template(f))
TOOL_TEMPLATES = {"qwen3": "qwen3.jinja", "qwen2": "qwen2_5.jinja", "llama": "llama3_3.jinja",
                  "mistral": "mistral.jinja"}


def tool_template(family: str) -> str:
    return (Path(__file__).parent / "data" / "fixtures" / "templates" /
            TOOL_TEMPLATES[family]).read_text()



def make_tokenizer(family: str, out: Path, chat_template: str | None = None):
    """mens's tiny byte-level BPE with the family's specials (ids 4093+), regex, BOS, template
    (the family's simple one, or `chat_template`)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from mens.export.arch import LLAMA3_PAT

    _, _, specials, bos, eos, pad, template, llama3 = FAMILIES[family]
    tj = json.loads((ASSETS / "tiny" / "tokenizer.json").read_text())
    n = len(tj["model"]["vocab"])
    if llama3:    # a whole-word digit token: only Llama 3's \p{N}{1,3} split can reach it, so a
        tj["model"]["vocab"]["123"] = n       # GGUF claiming another `pre` tokenizes differently
        n += 1
    tj["added_tokens"] = [dict(id=n + i, content=c, single_word=False, lstrip=False,
                               rstrip=False, normalized=False, special=True)
                          for i, c in enumerate(specials)]
    if llama3:    # Llama 3's split regex (digits in threes) and its ignore_merges
        tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = LLAMA3_PAT
        tj["model"]["ignore_merges"] = True
    if bos:       # BOS added by the post-processor, as Llama 3 / Gemma / Mistral tokenizers do
        b = {"SpecialToken": {"id": bos, "type_id": 0}}
        tj["post_processor"] = {
            "type": "TemplateProcessing", "single": [b, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [b, {"Sequence": {"id": "A", "type_id": 0}}, b,
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [n + specials.index(bos)],
                                     "tokens": [bos]}}}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(tj)),
                                  bos_token=bos, eos_token=eos, pad_token=pad,
                                  chat_template=chat_template or template,
                                  clean_up_tokenization_spaces=False)
    tok.save_pretrained(str(out))
    return tok


def make_model(family: str, out: Path, vocab: int):
    """A tiny random model of the family, every tensor random (norms and biases too)."""
    import torch
    import transformers

    cls, kw, *_ = FAMILIES[family]
    torch.manual_seed(0)
    cfg = getattr(transformers, cls)(vocab_size=vocab, **kw)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:   # Gemma's norms are (1 + w), the others w: random either way
                p.copy_((0.0 if family.startswith("gemma") else 1.0) + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.normal_(0, 0.2)
            elif "embed" in name and family.startswith("gemma"):
                # Gemma scales embeddings by sqrt(hidden) into a tied head: at std 0.1 the
                # input token dominates and decodes repeat one token; 0.02 (Gemma's own
                # initializer_range) gives varied decodes with top-2 margins ~1e-2
                p.normal_(0, 0.02)
    model.save_pretrained(str(out))
    return model
