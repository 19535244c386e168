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

import re
from typing import Mapping, NamedTuple, Sequence

from mens.data.chat_template import find_template, render, special_tokens
from mens.errors import DataError

IGNORE = -100   # = mens.data.pack.IGNORE (not imported: pack imports torch)
_SENTINEL = re.compile("\ue000(\\d+)\ue001")
_THINK = re.compile(r"^\s*<think>(.*?)</think>(.*)$", re.S)
# How templates change a content before writing it (as is first: the common case).
_TRANSFORMS = (lambda s: s, str.strip, lambda s: s.lstrip("\n"), lambda s: s.strip("\n"),
               str.rstrip, str.lstrip)


def _mark(k: int) -> str:
    return f"\ue000{k}\ue001"


class Rendered(NamedTuple):
    text: str                          # the full rendered chat
    spans: list[tuple[int, int]]       # [start, end) character spans to supervise, in order
    note: str | None                   # set when the system prompt was folded: print it once


class ChatTemplate:
    """A chat template plus the special tokens it renders: load once per run, use per record."""

    def __init__(self, source: str, variables: Mapping[str, str] | None = None,
                 tokens: Sequence[str] = (), origin: str = ""):
        self.source, self.origin = source, origin
        self.variables = dict(variables or {})   # bos_token, eos_token, … as the template sees them
        toks = set(tokens) | set(self.variables.values())
        self.tokens = tuple(sorted((t for t in toks if t), key=len, reverse=True))
        self._system_cache: dict[str, str | None] = {}

    @classmethod
    def load(cls, model_dir, override: str | None = None) -> "ChatTemplate":
        """The model's template (or data.chat_template's). ConfigError (exit 2) if it has none."""
        source, origin = find_template(model_dir, override)
        variables, tokens = special_tokens(model_dir)
        return cls(source, variables, tokens, origin)

    def render(self, messages, add_generation_prompt: bool = False, options=None) -> str:
        return render(self.source, messages, self.variables, add_generation_prompt, options)

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
    def render_spans(self, messages, options=None) -> Rendered:
        """The rendered chat and the character spans to supervise (see the module docstring).
        Raises DataError when the template refuses the record (e.g. roles not alternating)."""
        msgs, note = self._fold([dict(m) for m in messages], options)
        try:
            real = self.render(msgs, False, options)
        except Exception as e:
            raise DataError(f"the chat template ({self.origin}) refuses this record: {e}",
                            key="messages") from e
        for cand in _candidates(msgs):
            if cand is not msgs and self.render(cand, False, options) != real:
                continue   # the template writes inline <think> differently from reasoning_content
            values, probe = _probe(cand)
            found = _align(_SENTINEL.split(self.render(probe, False, options)), values, real)
            if found is not None:
                return Rendered(real, self._spans(cand, found, values, real), note)
        raise DataError(
            f"the chat template ({self.origin}) rewrites message contents in a way mens cannot "
            "align (not as is, trimmed or stripped of newlines), so the assistant tokens are "
            "unknown; name a simpler template with data.chat_template.", key="data.chat_template")

    def _spans(self, msgs, found, values, real) -> list[tuple[int, int]]:
        spans = []
        for i, m in enumerate(msgs):
            if m.get("role") != "assistant" or 2 * i not in found:
                continue
            start, end = found[2 * i]
            if 2 * i + 1 in found and found[2 * i + 1][0] <= start:
                # reasoning the template wrote before the answer: supervised from its <think>
                r0, _ = found[2 * i + 1]
                prev = max([e for k, (s, e) in found.items() if e <= r0] or [0])
                think = real.rfind("<think>", prev, r0)
                start = think if think >= 0 else r0
            eot = next((t for t in self.tokens if real.startswith(t, end)), "")
            spans.append((start, end + len(eot)))
        return spans

    # ---- tokens -------------------------------------------------------------------------
    def encode(self, tokenizer, messages, max_len: int | None = None, options=None,
               stats: dict | None = None, notes: set | None = None) -> tuple[list[int], list[int]]:
        """(ids, labels) of a chat: labels = ids on the supervised spans, -100 elsewhere.

        The whole rendered text is tokenized at once with add_special_tokens=False — as
        transformers' apply_chat_template(tokenize=True) does — so the template's own BOS text
        is the only BOS (never doubled by the tokenizer's post-processor). A token straddling a
        span edge is supervised (any overlap, as transformers' assistant mask): with
        SentencePiece/byte-level BPE the first answer token often carries the space before it
        (Mistral's `[/INST] Hi` → `▁Hi`), and that token is the one the model must produce.
        `tokenizer`: a `tokenizers.Tokenizer` (or a transformers fast tokenizer).
        `max_len` keeps the first max_len tokens; `stats` counts truncated_records/_tokens;
        `notes` (a set) receives the system-folding note."""
        text, spans, note = self.render_spans(messages, options)
        if note and notes is not None:
            notes.add(note)
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
        return ids[:keep], labels[:keep]

    def prompt_text(self, messages, options=None, notes: set | None = None) -> str:
        """What serving feeds the model: the same template, folding and options as training,
        plus the template's generation prompt (Qwen3 with enable_thinking=False: an empty
        think block, exactly the prefix its training records had before the answer)."""
        msgs, note = self._fold([dict(m) for m in messages], options)
        if note and notes is not None:
            notes.add(note)
        return self.render(msgs, True, options)


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
        if isinstance(m.get("content"), str):
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
