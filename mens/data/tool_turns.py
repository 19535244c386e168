"""The tool-call half of a chat template (mens.data.template.ChatTemplate inherits it): can the
template write tools, the Hermes fallback (`data.tool_format=hermes`), where a tool-calling turn
ends, and how many of its calls read back out of the rendered text. No torch.
"""
from __future__ import annotations

from mens.data import tool_syntax as TS
from mens.errors import DataError

TOOL_FORMATS = ("native", "hermes")   # data.tool_format


def mark(k: int) -> str:
    """The k-th sentinel (private-use characters, no whitespace: templates' trims keep it)."""
    return f"\ue000{k}\ue001"


class ToolTurns:
    """Needs of its host: render(messages, add_generation_prompt, options, tools), tokens,
    origin, tool_format, _tools_ok and _eot_cache."""

    def renders_tools(self) -> bool:
        """Whether the template writes both a tool's schema and a call to it (probed once)."""
        if self._tools_ok is None:
            fn = {"name": "mens_probe_fn", "arguments": {"mens_probe_arg": 1}}
            tools = [{"type": "function", "function": {
                "name": "mens_probe_fn", "description": "probe",
                "parameters": {"type": "object", "properties": {"mens_probe_arg": {
                    "type": "integer"}}}}}]
            msgs = [{"role": "user", "content": "q"},
                    {"role": "assistant", "content": "",
                     "tool_calls": [{"id": "a1b2c3d4e", "type": "function", "function": fn}]}]
            try:
                text = self.render(msgs, False, None, tools)
                self._tools_ok = text.count("mens_probe_fn") >= 2 and "mens_probe_arg" in text
            except Exception:   # a template bug or raise_exception: it cannot
                self._tools_ok = False
        return self._tools_ok

    def _tooled(self, msgs: list[dict], tools):
        """(messages, tools, {turn index: its calls}, note) as the template will render them:
        unchanged natively, Hermes text under data.tool_format=hermes; DataError when the record
        uses tools and the template cannot write them (never a call silently dropped)."""
        tools = tools or None
        called = {i: m["tool_calls"] for i, m in enumerate(msgs) if m.get("tool_calls")}
        if not tools and not called:
            return msgs, None, {}, None
        if self.tool_format == "hermes":
            hermes, turns = TS.hermes_messages(msgs, tools)
            return hermes, None, turns, (
                "data.tool_format=hermes: tool schemas go into the system turn and calls are "
                "written as <tool_call> JSON blocks, tool results as <tool_response> user turns "
                f"(the chat template {self.origin or '(inline)'} renders them as text)")
        if not self.renders_tools():
            raise DataError(
                f"the chat template ({self.origin or 'inline'}) cannot render tools: it writes no "
                "tool schema or tool call, so the record's calls would be lost. Set "
                "data.tool_format=hermes to write them as Hermes <tool_call> blocks, or name a "
                "template with tools in data.chat_template.", key="data.tool_format")
        return msgs, tools, called, None

    def _eot(self, options) -> str:
        """The end-of-turn token the template writes after an assistant answer ('' if none)."""
        key = repr(sorted((options or {}).items()))
        if key not in self._eot_cache:
            probe = [{"role": "user", "content": mark(0)},
                     {"role": "assistant", "content": mark(1)}]
            eot = ""
            try:
                text = self.render(probe, False, options)
                at = text.find(mark(1))
                if at >= 0:
                    at += len(mark(1))
                    eot = next((t for t in self.tokens if text.startswith(t, at)), "")
            except Exception:   # noqa: BLE001 - a template that refuses the probe: no eot known
                pass
            self._eot_cache[key] = eot
        return self._eot_cache[key]

    def _call_end(self, real: str, after: int, options) -> int:
        """The end of a tool-calling turn: its end-of-turn token, included (as for answers)."""
        eot = self._eot(options)
        at = real.find(eot, after) if eot else -1
        if at < 0:
            raise DataError(f"the chat template ({self.origin}) writes no end-of-turn token after "
                            "a tool call that mens can find, so the call's tokens are unknown; "
                            "name a template with data.chat_template.", key="data.chat_template")
        return at + len(eot)


def rendered_calls(calls: list[dict], got: list[dict] | None, text: str) -> int:
    """How many of a turn's calls the rendered span holds: parsed back in the template's syntax
    and equal in name and arguments, in order (None: a syntax mens cannot parse — each call's
    name must then appear in the span, in order)."""
    if got is None:
        n, at = 0, 0
        for c in calls:
            at = text.find(c["function"]["name"], at)
            if at < 0:
                break
            n, at = n + 1, at + 1
        return n
    return sum(a["function"] == {"name": b["function"]["name"],
                                 "arguments": b["function"]["arguments"]}
               for a, b in zip(calls, got))
