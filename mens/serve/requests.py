"""Request bodies of the OpenAI-compatible API, and `unsupported`: what mens does not implement.

Every field the server honours is declared with a strict type (`"max_tokens": "5"` is a 400,
as in OpenAI's API). Nothing else is dropped silently: `unsupported` lists, for one 400 that
names them all,
  - fields OpenAI defines that mens does not implement (the penalties, `logit_bias`, ...)
    set to anything but their no-op value (`presence_penalty: 0`, ...);
  - every other field (`response_format`, `user`, `metadata`, a vendor's extension, a typo
    such as `max_token`), whatever its value but null — as OpenAI itself answers
    "Unrecognized request argument supplied".
The same holds inside messages (`name` too, except on a `tool` turn: no chat template mens
serves renders a user's name), tool calls, content parts and `stream_options`. A JSON null is
OpenAI's "not given", and is accepted as such.

Tools (issue #38): `tools`, `tool_choice`, `parallel_tool_calls`, assistant turns with
`tool_calls` (content null) and `tool` turns with `tool_call_id` are declared here only as
shapes; what they mean — schemas and calls checked by mens.data.tools, as training checks
them — is mens.serve.chat's.
"""
from __future__ import annotations

import json
from typing import Annotated, ClassVar, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr


class Body(BaseModel):
    """A request body (or a part of one): extra fields are kept, so `unsupported` can name them."""
    model_config = ConfigDict(extra="allow")
    # declared OpenAI fields mens does not implement → the values that are no-ops
    no_op: ClassVar[dict[str, tuple]] = {}


class TextPart(Body):
    type: Literal["text"]
    text: StrictStr


class Function(Body):
    name: StrictStr
    # OpenAI sends a JSON string; an object is taken too (mens's records use one)
    arguments: Union[StrictStr, dict] = "{}"


class ToolCall(Body):
    id: Optional[StrictStr] = None
    type: Literal["function"] = "function"
    function: Function
    # its place in a streamed answer: the openai client keeps it on the message it accumulates
    # (and sends back); mens.serve.chat checks it is the call's place in the list
    index: Optional[StrictInt] = None


class Message(Body):
    role: Literal["system", "developer", "user", "assistant"]
    # null only on an assistant turn that calls tools (mens.serve.chat says so otherwise)
    content: Union[StrictStr, List[TextPart], None] = None
    tool_calls: Optional[List[ToolCall]] = None

    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ToolMessage(Message):
    """A tool's result: answers the call whose id it names (OpenAI's form)."""
    role: Literal["tool"]
    tool_call_id: Optional[StrictStr] = None
    name: Optional[StrictStr] = None      # the function it answers (legacy; templates may read it)


class NamedFunction(Body):
    name: StrictStr


class NamedToolChoice(Body):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(Body):
    include_usage: StrictBool = False


class Sampling(Body):
    model: StrictStr
    max_tokens: Optional[StrictInt] = None
    temperature: Optional[Annotated[StrictFloat, Field(ge=0, le=2)]] = None
    top_p: Optional[Annotated[StrictFloat, Field(gt=0, le=1)]] = None
    stop: Union[StrictStr, Annotated[List[StrictStr], Field(max_length=4)], None] = None
    stream: Optional[StrictBool] = False
    stream_options: Optional[StreamOptions] = None
    seed: Optional[Annotated[StrictInt, Field(ge=-(2**63), lt=2**64)]] = None   # torch's range
    n: Optional[Annotated[StrictInt, Field(ge=1, le=64)]] = None   # choices, one batch
    presence_penalty: Optional[StrictFloat] = None
    frequency_penalty: Optional[StrictFloat] = None
    logit_bias: Optional[dict] = None
    # vLLM's extension: each choice's `token_ids` (and `prompt_token_ids`): a token-exact answer
    return_token_ids: Optional[StrictBool] = None
    no_op: ClassVar[dict[str, tuple]] = {
        "presence_penalty": (0, 0.0), "frequency_penalty": (0, 0.0), "logit_bias": ({},)}


AnyMessage = Annotated[Union[ToolMessage, Message], Field(discriminator="role")]


class ChatRequest(Sampling):
    messages: Annotated[List[AnyMessage], Field(min_length=1)]
    max_completion_tokens: Optional[StrictInt] = None
    tools: Optional[list] = None          # schemas: checked by mens.data.tools.normalize_tools
    tool_choice: Union[Literal["auto", "none", "required"], NamedToolChoice, None] = None
    parallel_tool_calls: Optional[StrictBool] = None
    logprobs: Optional[StrictBool] = None                                 # OpenAI: a flag here
    top_logprobs: Optional[Annotated[StrictInt, Field(ge=0, le=20)]] = None


class CompletionRequest(Sampling):
    prompt: Union[StrictStr, List[StrictStr], List[StrictInt], List[List[StrictInt]]]
    echo: Optional[StrictBool] = None
    suffix: Optional[StrictStr] = None
    best_of: Optional[StrictInt] = None
    logprobs: Optional[Annotated[StrictInt, Field(ge=0, le=20)]] = None  # legacy: how many top
    # vLLM's extension: each prompt token's log-prob (and the top k) — scoring given tokens
    # (mens.serve.score; a served distillation teacher)
    prompt_logprobs: Optional[Annotated[StrictInt, Field(ge=0, le=20)]] = None
    no_op: ClassVar[dict[str, tuple]] = {**Sampling.no_op, "echo": (False,), "suffix": ("",),
                                         "best_of": (1,)}


class PromoteRequest(Body):
    spoke: StrictStr
    slot: Optional[StrictStr] = None


class RollbackRequest(Body):
    spoke: StrictStr


class LoadLoraRequest(Body):        # vLLM's POST /v1/load_lora_adapter
    lora_name: StrictStr
    lora_path: StrictStr


class UnloadLoraRequest(Body):      # vLLM's POST /v1/unload_lora_adapter
    lora_name: StrictStr


def unsupported(body: Body, at: str = "") -> list[tuple[str, str]]:
    """(dotted field path, what is accepted instead) for every field of `body`, nested parts
    included, that the server does not implement: declared ones first, then the others."""
    out = []
    for key in type(body).model_fields:
        value = getattr(body, key)
        if value is None:
            continue
        if key in body.no_op and value not in body.no_op[key]:
            ok = " or ".join(json.dumps(v) for v in body.no_op[key])
            out.append((at + key, f"only {ok} or null"))
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, Body):
                out += unsupported(item, f"{at}{key}.{i}." if isinstance(value, list) else f"{at}{key}.")
    out += [(at + key, "remove it") for key, value in (body.model_extra or {}).items()
            if value is not None]
    return out


def unsupported_message(body: Body, found: list[tuple[str, str]]) -> str:
    names = ", ".join(f"`{path}` ({fix})" for path, fix in found)
    honoured = ", ".join(k for k in type(body).model_fields if k not in body.no_op)
    return (f"This server does not implement {names}: it refuses them rather than ignore them. "
            f"It implements: {honoured}.")
