"""Find a model's chat template and render it exactly as transformers does — with jinja2 only.

Planning measures token lengths before any model loads, so this module (and mens.data.template
on top of it) imports neither torch nor transformers: the template comes from the model's files
(`chat_template.jinja`, or `chat_template` in tokenizer_config.json / chat_template.json) or
from `data.chat_template` (a .jinja file or a built-in name), and renders in the same sandboxed
environment that transformers' `apply_chat_template` builds (transformers/utils/
chat_template_utils.py: ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, `raise_exception`, a non-escaping `tojson`, `strftime_now`, the special tokens as
variables, `tools` (the record's schemas, or None) and `documents=None` passed explicitly,
None-valued message keys dropped, reasoning aliased to `reasoning_content`/`thinking`).
tests/data/test_template.py checks the rendering against transformers for the real Qwen3,
Qwen2.5, Llama 3, Mistral and Gemma 2/3 templates, tool calls included.
"""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from mens.errors import ConfigError

# transformers' `special_tokens_map`: what a template sees as variables (bos_token, …)
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token")
# ChatML exactly as the embedded tiny rung ships it (mens/assets/tiny/tokenizer_config.json),
# so `data.chat_template=chatml` and the tiny rung's own template render the same text. Without
# tools every message is <|im_start|>{role}\n{content}<|im_end|>\n (mens.data.pack's framing);
# with tools it writes them as Qwen2.5/Qwen3 do — the schemas in the system turn, each call as a
# <tool_call> JSON block after the assistant's content (mens.data.tool_syntax's `hermes`) — so
# a model tuned on the tiny rung learns the syntax a Qwen model would, and the server reads it.
CHATML = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (tools and loop.first and message['role'] == 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] }}"
    "{%- if message.tool_calls %}{%- for tool_call in message.tool_calls %}"
    "{%- if (loop.first and message['content']) or (not loop.first) %}{{- '\\n' }}{%- endif %}"
    "{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}"
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
BUILTIN = {"chatml": CHATML}
_REASONING = ("reasoning_content", "thinking", "reasoning")   # transformers' aliases, in order


def _token_text(value) -> str | None:
    # tokenizer_config.json writes a token as "<s>" or as {"content": "<s>", "lstrip": …}
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: unreadable JSON ({e}); re-download the model files.") from e


def _pick(template, where: str) -> str | None:
    """A `chat_template` value: a string, or a list of {name, template} (the "default" one)."""
    if isinstance(template, str) or template is None:
        return template
    named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
    if "default" in named:
        return named["default"]
    raise ConfigError(
        f"{where} has named chat templates ({', '.join(map(str, named))}) but none called "
        "'default'; name the one to train with in data.chat_template (a .jinja file).",
        key="data.chat_template")


def find_template(model_dir, override: str | None = None) -> tuple[str, str]:
    """(template source, where it came from). `override` (data.chat_template) wins."""
    if override:
        path = Path(str(override)).expanduser()
        if path.is_file():
            return path.read_text(encoding="utf-8"), str(path)
        if str(override).lower() in BUILTIN:
            return BUILTIN[str(override).lower()], f"built-in {str(override).lower()}"
        raise ConfigError(
            f"data.chat_template={override!r} is neither a file nor a built-in template "
            f"({', '.join(BUILTIN)}); give the path of a .jinja file or a built-in name.",
            key="data.chat_template")
    d = Path(model_dir)
    if (d / "chat_template.jinja").is_file():
        return (d / "chat_template.jinja").read_text(encoding="utf-8"), str(d / "chat_template.jinja")
    for name in ("tokenizer_config.json", "chat_template.json"):
        source = _pick(_read_json(d / name).get("chat_template"), str(d / name))
        if source:
            return source, str(d / name)
    raise ConfigError(
        f"the model in {d} has no chat template (no chat_template.jinja, and no chat_template in "
        "tokenizer_config.json), so mens cannot tell which tokens are the assistant's. Name one: "
        "data.chat_template=chatml (a built-in) or data.chat_template=/path/to/template.jinja.",
        key="data.chat_template")


def special_tokens(model_dir) -> tuple[dict[str, str], tuple[str, ...]]:
    """({bos_token: …, eos_token: …} for the template, every special/added token's text).

    The variables come from tokenizer_config.json, with special_tokens_map.json filling gaps;
    the token texts (end-of-turn candidates) also from tokenizer.json's `added_tokens`."""
    d = Path(model_dir) if model_dir is not None else None
    config = _read_json(d / "tokenizer_config.json") if d else {}
    smap = _read_json(d / "special_tokens_map.json") if d else {}
    variables = {}
    for key in SPECIAL_KEYS:
        text = _token_text(config.get(key)) or _token_text(smap.get(key))
        if text:
            variables[key] = text
    tokens = set(variables.values())
    tokens |= {_token_text(t) for t in config.get("added_tokens_decoder", {}).values()}
    for key in ("additional_special_tokens", "extra_special_tokens"):
        for src in (config, smap):
            extra = src.get(key) or []
            tokens |= {_token_text(t) for t in (extra.values() if isinstance(extra, dict) else extra)}
    if d and (d / "tokenizer.json").is_file():
        tokens |= {_token_text(t) for t in _read_json(d / "tokenizer.json").get("added_tokens", [])}
    return variables, tuple(sorted((t for t in tokens if t), key=len, reverse=True))


@lru_cache(maxsize=32)
def compile_template(source: str):
    """The jinja Template, built like transformers' `_compile_jinja_template` (cached per text)."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        # `{% generation %}…{% endgeneration %}` only marks text for transformers' assistant
        # mask; the rendered text is its body. We find the assistant spans ourselves.
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    class Namespace(jinja2.utils.Namespace):
        # as transformers: no dunder/underscore attributes on a template's namespace()
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} refused")

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # jinja's own tojson escapes < > & for HTML; transformers' (and so the model's) does not
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, namespace=Namespace,
                       strftime_now=lambda fmt: datetime.now().strftime(fmt))
    return env.from_string(source)


def plain_messages(messages) -> list[dict]:
    """Copies the template may see: None-valued keys dropped, reasoning under transformers'
    names (`reasoning_content`, and `thinking` for templates that read that)."""
    out = []
    for m in messages:
        m = {k: v for k, v in dict(m).items() if v is not None}
        reasoning = next((m[k] for k in _REASONING if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def render(source: str, messages, variables: dict, add_generation_prompt: bool = False,
           options: dict | None = None, tools: list[dict] | None = None) -> str:
    """The text transformers' `apply_chat_template(..., tokenize=False, tools=tools)` gives.
    Options (e.g. Qwen3's enable_thinking) override the special-token variables, as in
    transformers. Raises jinja2.TemplateError when the template refuses the messages."""
    kwargs = {**variables, **(options or {})}
    return compile_template(source).render(messages=plain_messages(messages), tools=tools or None,
                                           documents=None,
                                           add_generation_prompt=add_generation_prompt, **kwargs)
