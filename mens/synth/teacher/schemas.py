"""The structured outputs a teacher is asked for, and how a reply is checked.

    mens_subtopics  → {"subtopics": [string, ...]}
    mens_samples    → {"samples": [{"prompt": string, "response": string}, ...]}
    mens_tool_samples → {"samples": [{"prompt", "steps": [{"calls": [{"name", "arguments"}],
                        "results": [string]}], "answer"}, ...]}   (`mens data synth synth.tools=`)
    mens_repair     → {"response": string}
    mens_judgement  → {"winner": "A" | "B" | "tie", "reason": string}   (mens.eval.judge)
    mens_reward     → {"reason": string, "score": 0 | 1 | … | 10}    (mens.objective.rewards)

`SCHEMAS[name]` is the strict JSON Schema sent as `response_format = {"type": "json_schema",
"json_schema": {"name": name, "schema": SCHEMAS[name], "strict": true}}` — OpenAI's strict subset
(every property required, additionalProperties false, no other keywords), so an endpoint that
enforces it accepts it. The same schema goes into the prompt for endpoints without
response_format (`schema_instruction`).

`check(name, text)` parses and validates a reply with the `jsonschema` library (Draft 2020-12).
Validation is a little stricter than the schema sent: a string must not be empty or blank (an
empty prompt is never a sample; the strict subset has no minLength to ask for it). For
`mens_samples` the reply is validated item by item: the valid samples are KEPT and the invalid
ones dropped with their error — one bad sample never costs the batch. `mens_tool_samples` is
checked the same way. Its call `arguments` are a string holding a JSON object, as OpenAI's own
tool_calls carry them: the strict subset cannot express "any object" (additionalProperties must
be false), and whether the arguments fit the tool's schema is the synthesis oracle's to say
(mens.synth.tool_synth), with the tool named — not this envelope's.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from jsonschema import Draft202012Validator

NAMES = ("mens_subtopics", "mens_samples", "mens_repair", "mens_judgement", "mens_reward",
         "mens_tool_samples")

_STR = {"type": "string"}
SAMPLE = {"type": "object", "properties": {"prompt": _STR, "response": _STR},
          "required": ["prompt", "response"], "additionalProperties": False}
_CALL = {"type": "object", "properties": {"name": _STR, "arguments": _STR},
         "required": ["name", "arguments"], "additionalProperties": False}
_STEP = {"type": "object", "properties": {"calls": {"type": "array", "items": _CALL},
                                          "results": {"type": "array", "items": _STR}},
         "required": ["calls", "results"], "additionalProperties": False}
# one tool-using conversation: the request, the rounds of calls (each with one result per call,
# in order; none when the request needs no tool) and the final answer
TOOL_SAMPLE = {"type": "object",
               "properties": {"prompt": _STR, "steps": {"type": "array", "items": _STEP},
                              "answer": _STR},
               "required": ["prompt", "steps", "answer"], "additionalProperties": False}
SCHEMAS: dict[str, dict] = {
    "mens_subtopics": {"type": "object", "properties": {"subtopics": {"type": "array",
                                                                      "items": _STR}},
                       "required": ["subtopics"], "additionalProperties": False},
    "mens_samples": {"type": "object", "properties": {"samples": {"type": "array",
                                                                  "items": SAMPLE}},
                     "required": ["samples"], "additionalProperties": False},
    "mens_repair": {"type": "object", "properties": {"response": _STR},
                    "required": ["response"], "additionalProperties": False},
    # mens.eval.judge's pairwise verdict (`enum` is in OpenAI's strict subset)
    "mens_judgement": {"type": "object",
                       "properties": {"winner": {"type": "string", "enum": ["A", "B", "tie"]},
                                      "reason": _STR},
                       "required": ["winner", "reason"], "additionalProperties": False},
    # GRPO's teacher reward (grpo.reward=teacher): one answer scored 0..10; `reason` comes first
    # so the judge explains before it scores (a strict endpoint writes properties in order)
    "mens_reward": {"type": "object",
                    "properties": {"reason": _STR,
                                   "score": {"type": "integer", "enum": list(range(11))}},
                    "required": ["reason", "score"], "additionalProperties": False},
    "mens_tool_samples": {"type": "object",
                          "properties": {"samples": {"type": "array", "items": TOOL_SAMPLE}},
                          "required": ["samples"], "additionalProperties": False},
}
# the replies checked item by item: their samples' item schema
ITEMS = {"mens_samples": SAMPLE, "mens_tool_samples": TOOL_SAMPLE}


def _not_blank(schema):
    """The schema as validated: every string also non-blank (`pattern: \\S`)."""
    if isinstance(schema, dict):
        out = {k: _not_blank(v) for k, v in schema.items()}
        if out.get("type") == "string":
            out["pattern"] = r"\S"
        return out
    return schema


_VALIDATORS = {n: Draft202012Validator(_not_blank(s)) for n, s in SCHEMAS.items()}
_ITEM = {n: Draft202012Validator(_not_blank(s)) for n, s in ITEMS.items()}
for _s in [*SCHEMAS.values(), SAMPLE]:
    Draft202012Validator.check_schema(_s)


def response_format(name: str) -> dict:
    """The `response_format` argument of a chat completion asking for `name`."""
    return {"type": "json_schema",
            "json_schema": {"name": name, "schema": SCHEMAS[_known(name)], "strict": True}}


def schema_instruction(name: str) -> str:
    """The prompt text that carries the schema to an endpoint without response_format."""
    return (f"Answer with one JSON object and nothing else (no prose, no code fence). It must "
            f"validate against this JSON Schema, named {name}: "
            f"{json.dumps(SCHEMAS[_known(name)], separators=(',', ':'))}")


@dataclass
class Checked:
    """One reply, checked. `data` is the validated object (mens_samples: the valid samples only)
    or None; `invalid_json` / `violations` say what was wrong; `dropped` holds the samples left
    out, each {"item", "error"}."""
    data: dict | None = None
    invalid_json: bool = False
    violations: list[str] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)

    @property
    def error(self) -> str | None:
        """One line for a retry prompt or a record's diagnostics (None: nothing wrong)."""
        if self.invalid_json:
            return self.violations[0] if self.violations else "the reply is not JSON"
        return "; ".join(self.violations) if self.violations else None


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n?(.*?)\n?\s*```\s*$", re.S)


def check(name: str, text: str | None) -> Checked:
    """Parse `text` as JSON (a reply wrapped in one ```json fence is unwrapped: many chat models
    add it despite being told not to) and validate it against `name`."""
    _known(name)
    if text is None or not text.strip():
        return Checked(invalid_json=True, violations=["the reply is empty"])
    m = _FENCE.match(text)
    try:
        obj = json.loads(m.group(1) if m else text)
    except json.JSONDecodeError as e:
        return Checked(invalid_json=True,
                       violations=[f"the reply is not JSON ({e.msg} at char {e.pos})"])
    except RecursionError:
        return Checked(invalid_json=True, violations=["the reply is not JSON (nested too deep)"])
    if name in ITEMS:
        return _check_samples(obj, name)
    errors = _errors(_VALIDATORS[name], obj)
    return Checked(data=None if errors else obj, violations=errors)


def _check_samples(obj, name: str = "mens_samples") -> Checked:
    """Item by item. Without a `samples` list nothing is usable; with one, each valid sample is
    kept even when others (or the envelope: an extra key) violate the schema — counted. A reply
    whose samples were all invalid has data None (so prompt mode asks once more)."""
    if not (isinstance(obj, dict) and isinstance(obj.get("samples"), list)):
        return Checked(violations=_errors(_VALIDATORS[name], obj))
    violations = _errors(_VALIDATORS[name], {**obj, "samples": []})
    kept, dropped = [], []
    for i, item in enumerate(obj["samples"]):
        item_errors = _errors(_ITEM[name], item, f"samples[{i}]")
        if item_errors:
            dropped.append({"item": item, "error": "; ".join(item_errors)})
        else:
            kept.append(item)
    # no sample survived: nothing usable (an honest empty list, with no violation, is data)
    return Checked(data={"samples": kept} if kept or not dropped else None, dropped=dropped,
                   violations=violations + [d["error"] for d in dropped])


def _errors(validator, obj, where: str = "") -> list[str]:
    out = []
    for e in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path)):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
        at = (where + path).lstrip(".") or "the reply"
        msg = "is empty" if e.validator == "pattern" else e.message
        out.append(f"{at}: {msg}"[:300])
    return out


def _known(name: str) -> str:
    if name not in SCHEMAS:
        raise ValueError(f"unknown teacher schema {name!r}: use one of {', '.join(NAMES)}")
    return name
