"""Assistant-only labels from the model's own chat template (issue #12), with jinja2 + `tokenizers`.

Most stock templates have no `{% generation %}` markers (transformers' assistant mask is then
all zeros), so the supervised text is found by rendering twice: once for real, once with every
message's content (and reasoning) replaced by a sentinel — private-use characters, no
whitespace, so `| trim` and `.strip()` keep it. Splitting the sentinel render gives the
template's own text between the contents; walking it along the real render (each content as is,
or trimmed the way the template trims it) gives each content's exact span. Supervised, per
assistant turn: its content plus the end-of-turn token the template writes right after it
(`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`, `</s>`: the longest special/added token starting
there), never the header, the newline after the end-of-turn, or the template's own empty think
block (Qwen3 adds `<think>\\n\\n</think>\\n\\n` to the last assistant turn). A turn that holds
reasoning (`reasoning_content`, or content opening with `<think>…</think>`) is supervised from
its `<think>` on — wherever the template puts the reasoning, that is the model's to write.

System prompts: a template that refuses a system role (Gemma 2 raises) or silently drops it
(Mistral v0.3 writes it only into a *last* user turn, never in a training record that ends with
the answer) gets it folded into the first user turn, `system + "\\n\\n" + user`, with a note for
the console. Gemma 3 folds it itself: nothing to do. Serving (`prompt_text`) folds the same way
and takes the same options (Qwen3's `enable_thinking`), so train and serve see one format.
"""
from __future__ import annotations

import json
import re
from typing import Mapping, NamedTuple, Sequence

from mens.data import tool_syntax as TS
from mens.data.chat_template import find_template, render, special_tokens
from mens.data.tool_turns import TOOL_FORMATS, ToolTurns, rendered_calls
from mens.data.tool_turns import mark as _mark
from mens.errors import DataError

IGNORE = -100   # = mens.data.pack.IGNORE (not imported: pack imports torch)
_SENTINEL = re.compile("\ue000(\\d+)\ue001")
_THINK = re.compile(r"^\s*<think>(.*?)</think>(.*)$", re.S)
# How templates change a content before writing it (as is first: the common case).
_TRANSFORMS = (lambda s: s, str.strip, lambda s: s.lstrip("\n"), lambda s: s.strip("\n"),
               str.rstrip, str.lstrip,
               # a string content written through `tojson` (Llama 3.1's tool results)
               lambda s: json.dumps(s, ensure_ascii=False)[1:-1])


class Rendered(NamedTuple):
    text: str                          # the full rendered chat
    spans: list[tuple[int, int]]       # [start, end) character spans to supervise, in order
    note: str | None                   # set when the system prompt was folded: print it once
    # per assistant turn that calls tools: (its span's end, calls it holds, calls that read back
    # out of the span in the template's own syntax — equal unless the template lost some)
    calls: tuple = ()


class ChatTemplate(ToolTurns):
    """A chat template plus the special tokens it renders: load once per run, use per record."""

    def __init__(self, source: str, variables: Mapping[str, str] | None = None,
                 tokens: Sequence[str] = (), origin: str = "", tool_format: str = "native"):
        self.source, self.origin = source, origin
        if tool_format not in TOOL_FORMATS:
            raise DataError(f"data.tool_format={tool_format!r}: choose native (the template's own "
                            f"tool syntax) or hermes.", key="data.tool_format")
        self.tool_format = tool_format
        # the call syntax the model learns and serving parses: the template's own, or Hermes
        self.syntax = "hermes" if tool_format == "hermes" else TS.syntax_of(source)
        self._tools_ok: bool | None = None
        self._eot_cache: dict[str, str] = {}
        self.variables = dict(variables or {})   # bos_token, eos_token, … as the template sees them
        toks = set(tokens) | set(self.variables.values())
        self.tokens = tuple(sorted((t for t in toks if t), key=len, reverse=True))
        self._system_cache: dict[str, str | None] = {}

    @classmethod
    def load(cls, model_dir, override: str | None = None,
             tool_format: str = "native") -> "ChatTemplate":
        """The model's template (or data.chat_template's). ConfigError (exit 2) if it has none."""
        source, origin = find_template(model_dir, override)
        variables, tokens = special_tokens(model_dir)
        return cls(source, variables, tokens, origin, tool_format)

    def render(self, messages, add_generation_prompt: bool = False, options=None,
               tools=None) -> str:
        return render(self.source, messages, self.variables, add_generation_prompt, options,
                      tools)

    # ---- system prompt ------------------------------------------------------------------
    def _fold(self, messages: list[dict], options) -> tuple[list[dict], str | None]:
        """Messages with a leading system turn folded into the first user turn when the
        template cannot keep it (see `_system_role`); unchanged otherwise."""
        if not messages or messages[0].get("role") != "system":
            return messages, None
        why = self._system_role(options)
        if why is None:
            return messages, None
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if not users:
            raise DataError(f"the chat template ({self.origin}) {why}, and the record has no user "
                            "turn to fold the system prompt into; add one.", key="messages")
        rest = [dict(m) for m in messages[1:]]
        u = users[0] - 1
        rest[u]["content"] = f"{messages[0]['content']}\n\n{rest[u]['content']}"
        return rest, (f"chat template {self.origin or '(inline)'} has no system role (it {why}): "
                      "the system prompt is folded into the first user turn, in training and "
                      "serving alike.")

    def _system_role(self, options) -> str | None:
        """None if the template keeps a system prompt in a training-shaped chat (system, user,
        assistant), else why not. A property of the template, probed once per options on
        sentinels; serving folds on the same answer, so both see the system prompt in one place
        (Mistral v0.3 itself would move it to the last user turn at serving time)."""
        key = repr(sorted((options or {}).items()))
        if key not in self._system_cache:
            probe = [{"role": r, "content": _mark(i)}
                     for i, r in enumerate(("system", "user", "assistant"))]
            try:
                kept = _mark(0) in self.render(probe, False, options)
                why = None if kept else "drops it from a chat that ends with the answer"
            except Exception as e:   # jinja2.TemplateError from raise_exception, or a template bug
                why = f"refuses it: {e}"
            self._system_cache[key] = why
        return self._system_cache[key]

    # ---- spans --------------------------------------------------------------------------
    def render_spans(self, messages, options=None, tools=None) -> Rendered:
        """The rendered chat and the character spans to supervise (see the module docstring).
        Raises DataError when the template refuses the record (e.g. roles not alternating)."""
        # tools first: the Hermes rendering adds a system turn, which a template without a system
        # role (Gemma 2) then gets folded like any other
        msgs, tools, called, tnote = self._tooled([dict(m) for m in messages], tools)
        msgs, note = self._fold(msgs, options)
        if note:   # the system turn went into the first user turn: every later turn moved up one
            called = {i - 1: c for i, c in called.items()}
        note = "\n".join(n for n in (note, tnote) if n) or None
        try:
            real = self.render(msgs, False, options, tools)
        except Exception as e:
            raise DataError(f"the chat template ({self.origin}) refuses this record: {e}",
                            key="messages") from e
        for cand in _candidates(msgs):
            if cand is not msgs and self.render(cand, False, options, tools) != real:
                continue   # the template writes inline <think> differently from reasoning_content
            values, probe = _probe(cand)
            found = _align(_SENTINEL.split(self.render(probe, False, options, tools)), values,
                           real)
            if found is not None:
                spans, calls = self._spans(cand, found, values, real, options, tools, called)
                return Rendered(real, spans, note, tuple(calls))
        raise DataError(
            f"the chat template ({self.origin}) rewrites message contents in a way mens cannot "
            "align (not as is, trimmed or stripped of newlines), so the assistant tokens are "
            "unknown; name a simpler template with data.chat_template.", key="data.chat_template")

    def _spans(self, msgs, found, values, real, options=None, tools=None, called=None):
        """(spans, calls): the supervised spans, and per tool-calling turn (span end, calls
        read, calls rendered). called: {turn index: the calls it makes} (under hermes the
        turn holds them as text)."""
        spans, calls, called = [], [], called or {}
        for i, m in enumerate(msgs):
            if m.get("role") != "assistant" or (2 * i not in found and not m.get("tool_calls")):
                continue
            if i in called and not m.get("tool_calls"):   # hermes: the calls are the content's
                end = found[2 * i][1]
                eot = next((t for t in self.tokens if real.startswith(t, end)), "")
                got = TS.parse(real[found[2 * i][0]:end], "hermes").calls
                calls.append((end + len(eot), len(called[i]), rendered_calls(called[i], got, "")))
            start = found[2 * i][0] if 2 * i in found else None
            if 2 * i + 1 in found and (start is None or found[2 * i + 1][0] <= start):
                # reasoning the template wrote before the answer: supervised from its <think>
                r0, _ = found[2 * i + 1]
                prev = max([e for k, (s, e) in found.items() if e <= r0] or [0])
                think = real.rfind("<think>", prev, r0)
                start = think if think >= 0 else r0
            if not m.get("tool_calls"):
                end = found[2 * i][1]
                eot = next((t for t in self.tokens if real.startswith(t, end)), "")
                spans.append((start, end + len(eot)))
                continue
            if start is None:
                start = self._call_start(msgs, i, found, real, options, tools)
            end = self._call_end(real, found[2 * i][1] if 2 * i in found else start, options)
            body = real[start:end - len(self._eot(options))]   # the call text, eot off
            got = TS.parse(body, self.syntax).calls if self.syntax else None
            calls.append((end, len(m["tool_calls"]), rendered_calls(m["tool_calls"], got, body)))
            spans.append((start, end))
        return spans, calls

    def _call_start(self, msgs, i, found, real, options, tools) -> int:
        """Where turn i's tool call begins in `real` when it has no content to mark: after the
        template's assistant header. The header is the text a plain answer in the same place
        gets before its content (msgs[:i] + one marked answer); where the two renders part
        inside a word (Qwen3's `<think>` vs `<tool_call>`) the start steps back to the last
        special token or newline they share."""
        prev = max([e for k, (s, e) in found.items() if k < 2 * i] or [0])
        variant = [*msgs[:i], {"role": "assistant", "content": _mark(2 * i)}]
        try:
            text = self.render(_probe(variant)[1], False, options, tools)
        except Exception as e:   # noqa: BLE001 - the template refuses a plain answer here
            raise DataError(f"the chat template ({self.origin}) refuses a plain answer where this "
                            f"record calls a tool ({e}), so mens cannot tell where the call "
                            "starts; name a template with data.chat_template.",
                            key="data.chat_template") from e
        at = text.find(_mark(2 * i))
        header = text[text.rfind("\ue001", 0, at) + 1:at]
        k = 0
        while k < len(header) and prev + k < len(real) and real[prev + k] == header[k]:
            k += 1
        if k < len(header):      # parted inside the header: back to a boundary both share
            while k > 0 and not (header[k - 1] == "\n" or
                                 any(header.endswith(t, 0, k) for t in self.tokens)):
                k -= 1
        return prev + k

    # ---- tokens -------------------------------------------------------------------------
    def encode(self, tokenizer, messages, max_len: int | None = None, options=None,
               stats: dict | None = None, notes: set | None = None,
               tools=None) -> tuple[list[int], list[int]]:
        """(ids, labels) of a chat: labels = ids on the supervised spans, -100 elsewhere.

        The whole rendered text is tokenized at once with add_special_tokens=False — as
        transformers' apply_chat_template(tokenize=True) does — so the template's own BOS text
        is the only BOS (never doubled by the tokenizer's post-processor). A token straddling a
        span edge is supervised (any overlap, as transformers' assistant mask): with
        SentencePiece/byte-level BPE the first answer token often carries the space before it
        (Mistral's `[/INST] Hi` → `▁Hi`), and that token is the one the model must produce.
        `tokenizer`: a `tokenizers.Tokenizer` (or a transformers fast tokenizer).
        `max_len` keeps the first max_len tokens; `stats` counts truncated_records/_tokens;
        `notes` (a set) receives the system-folding note. `tools`: the record's schemas.
        Tool calls are counted in `stats` — read, rendered (parsed back out of the supervised
        text) and supervised (not cut by max_len) — and a record whose template lost a call
        raises DataError: a call is never dropped silently."""
        text, spans, note, calls = self.render_spans(messages, options, tools)
        if note and notes is not None:
            notes.update(note.split("\n"))
        read, rendered = sum(c[1] for c in calls), sum(c[2] for c in calls)
        if rendered != read:
            raise DataError(f"the chat template ({self.origin}) rendered {rendered} of this "
                            f"record's {read} tool calls in a form that reads back as the same "
                            "name and arguments; mens stops rather than train on lost calls. "
                            "Check the calls' arguments, or set data.tool_format=hermes.",
                            key="data.tool_format")
        backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
        enc = backend.encode(text, add_special_tokens=False)
        ids, labels, j = list(enc.ids), [IGNORE] * len(enc.ids), 0
        for t, (a, b) in enumerate(enc.offsets):   # offsets and spans both ascend: one pass
            while j < len(spans) and spans[j][1] <= a:
                j += 1
            if j == len(spans):
                break
            if a < spans[j][1] and b > spans[j][0]:
                labels[t] = ids[t]
        dropped = max(0, len(ids) - max_len) if max_len is not None else 0
        if stats is not None:   # keys exist (at 0) once any record went through
            stats["truncated_records"] = stats.get("truncated_records", 0) + (dropped > 0)
            stats["truncated_tokens"] = stats.get("truncated_tokens", 0) + dropped
        keep = len(ids) - dropped
        if stats is not None and calls:
            kept_to = enc.offsets[keep - 1][1] if keep else 0
            cut = sum(n for end, n, _ in calls if end > kept_to)
            for k, v in (("tool_calls_read", read), ("tool_calls_rendered", rendered),
                         ("tool_calls_supervised", read - cut), ("tool_calls_truncated", cut)):
                stats[k] = stats.get(k, 0) + v
        return ids[:keep], labels[:keep]

    def prompt_text(self, messages, options=None, notes: set | None = None, tools=None) -> str:
        """What serving feeds the model: the same template, folding, options and tool rendering
        as training, plus the template's generation prompt (Qwen3 with enable_thinking=False:
        an empty think block, exactly the prefix its training records had before the answer)."""
        msgs, tools, _, tnote = self._tooled([dict(m) for m in messages], tools)
        msgs, note = self._fold(msgs, options)
        if notes is not None:
            notes.update(n for n in (note, tnote) if n)
        return self.render(msgs, True, options, tools)


def _candidates(msgs: list[dict]):
    """The record as given, and — when an assistant content opens with <think>…</think> — the
    same with that reasoning moved to `reasoning_content` (first: templates that read it render
    the two alike, and only the split form tells reasoning from answer on the sentinels)."""
    split, changed = [], False
    for m in msgs:
        hit = (m.get("role") == "assistant" and "reasoning_content" not in m
               and isinstance(m.get("content"), str) and _THINK.match(m["content"]))
        if hit:
            m = {**m, "reasoning_content": hit.group(1).strip("\n"),
                 "content": hit.group(2).lstrip("\n")}
            changed = True
        split.append(m)
    return [split, msgs] if changed else [msgs]


def _probe(msgs: list[dict]) -> tuple[dict[int, str], list[dict]]:
    """Sentinel copies: content of message i → mark 2i, its reasoning → 2i+1 (blank reasoning
    stays literal text: an empty think block is the template's, never supervised)."""
    values, probe = {}, []
    for i, m in enumerate(msgs):
        m = dict(m)
        # a tool-calling turn's empty content stays empty: templates test it (Qwen writes a newline
        # before the first <tool_call> only after a content) — its span is found from the header
        if isinstance(m.get("content"), str) and (m["content"] or not m.get("tool_calls")):
            values[2 * i], m["content"] = m["content"], _mark(2 * i)
        for key in ("reasoning_content", "thinking", "reasoning"):
            if isinstance(m.get(key), str) and m[key].strip():
                values[2 * i + 1] = m[key]
                m = {k: v for k, v in m.items() if k not in ("thinking", "reasoning")}
                m["reasoning_content"] = _mark(2 * i + 1)
                break
        probe.append(m)
    return values, probe


def _align(parts: list[str], values: dict[int, str], real: str):
    """{mark: (start, end) in real} or None. parts = [text, mark, text, mark, …, text] from the
    sentinel render; each mark's value is tried as is, then trimmed the ways templates trim,
    backtracking when a choice leaves the rest unmatched (an explicit stack: chats can be long)."""
    if not real.startswith(parts[0]):
        return None
    n, stack = len(parts), [(1, len(parts[0]), 0)]   # (part index, position in real, transform)
    chosen: list[tuple[int, int, int]] = []          # (mark, start, end) along the current path
    while stack:
        p, pos, t = stack.pop()
        del chosen[(p - 1) // 2:]
        if p >= n:
            if pos == len(real):
                found: dict[int, tuple[int, int]] = {}
                for k, a, b in chosen:
                    found.setdefault(k, (a, b))
                return found
            continue
        k, after = int(parts[p]), parts[p + 1]
        while t < len(_TRANSFORMS):
            v = _TRANSFORMS[t](values[k])
            t += 1
            if real.startswith(v, pos) and real.startswith(after, pos + len(v)):
                stack.append((p, pos, t))              # resume with the next transform
                chosen.append((k, pos, pos + len(v)))
                stack.append((p + 2, pos + len(v) + len(after), 0))
                break
    return None

