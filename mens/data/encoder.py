"""A run's encoder: its tokenizer and chat template, with one set of template options, shared by
planning (token lengths), training (ids and labels), inspection and serving — so the four see
the same text. No torch or transformers: the tokenizer is `tokenizers` on tokenizer.json (or
the backend of a transformers fast tokenizer already loaded).

Template options: `enable_thinking` = data.enable_thinking (default false). Qwen3's template
reads it for the generation prompt: false gives the empty think block that the template also
writes before the last answer of a training record, so serving continues exactly as training
taught. Templates that do not read it ignore it.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from mens.data.formats import kind, turns
from mens.data.template import ChatTemplate
from mens.errors import ConfigError


def _get(cfg, key, default=None):
    if cfg is None:
        return default
    return cfg.get(key, default) if isinstance(cfg, dict) else getattr(cfg, key, default)


class RunEncoder:
    def __init__(self, template: ChatTemplate, tokenizer, options: dict, origin: str = ""):
        self.template, self.options, self.origin = template, dict(options), origin
        self.tok = getattr(tokenizer, "backend_tokenizer", tokenizer)   # tokenizers.Tokenizer
        eos = template.variables.get("eos_token")
        self.eos_id = self.tok.token_to_id(eos) if eos else None
        self.notes: set[str] = set()
        self._said: set[str] = set()

    @classmethod
    def load(cls, model_dir, data=None, tokenizer=None) -> "RunEncoder":
        """The encoder of a model directory (config + tokenizer files) and a `data` section."""
        model_dir = Path(model_dir)
        if tokenizer is None:
            from tokenizers import Tokenizer

            path = model_dir / "tokenizer.json"
            if not path.is_file():
                raise ConfigError(f"{model_dir} has no tokenizer.json: mens reads fast "
                                  f"(tokenizers-library) tokenizers only.", key="rung")
            tokenizer = Tokenizer.from_file(str(path))
        template = ChatTemplate.load(model_dir, _get(data, "chat_template"),
                                     _get(data, "tool_format", "native") or "native")
        options = {"enable_thinking": bool(_get(data, "enable_thinking", False))}
        return cls(template, tokenizer, options, str(model_dir))

    def _say(self) -> None:
        for n in self.notes - self._said:   # loud, once per run
            print(f"mens: note: {n}", file=sys.stderr)
            self._said.add(n)

    @property
    def tool_syntax(self) -> str | None:
        """The tool-call syntax this run's model writes (mens.data.tool_syntax), or None."""
        return self.template.syntax

    def encode(self, messages, max_len: int | None = None, stats: dict | None = None,
               tools=None):
        """(ids, labels): labels on the assistant turns (content + end-of-turn token; a tool
        call's text + end-of-turn token); `tools`: the record's schemas."""
        out = self.template.encode(self.tok, messages, max_len, self.options, stats, self.notes,
                                   tools)
        self._say()
        return out

    def text_ids(self, text: str) -> list[int]:
        """A plain text's ids + EOS (continued pre-training: every token is supervised)."""
        ids = list(self.tok.encode(text, add_special_tokens=False).ids)
        return ids + ([self.eos_id] if self.eos_id is not None else [])

    def prompt_text(self, messages, tools=None) -> str:
        out = self.template.prompt_text(messages, self.options, self.notes, tools)
        self._say()
        return out

    def fingerprint(self) -> str:
        """Changes whenever the tokens a record becomes could change."""
        h = hashlib.sha256(self.tok.to_str().encode())
        h.update(self.template.source.encode())
        h.update(repr(sorted(self.options.items())).encode())
        h.update(self.template.tool_format.encode())
        return h.hexdigest()

    def marked(self, rec: dict) -> str:
        """One record rendered through the template, supervised text in ⟦…⟧."""
        if kind(rec) == "text":
            return f"⟦{rec['text']}⟧ (+ EOS)"
        msgs = turns(rec)
        text, spans, _, _ = self.template.render_spans(msgs, self.options, rec.get("tools"))
        out, at = [], 0
        for a, b in spans:
            out += [text[at:a], "⟦", text[a:b], "⟧"]
            at = b
        return "".join(out + [text[at:]])
