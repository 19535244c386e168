"""A distillation teacher behind an OpenAI-compatible server (`lane.distill.teacher_url`, issue
#39): the student samples, the server scores the student's tokens, the trainer never holds the
teacher's weights.

    lane.distill.teacher_url=http://127.0.0.1:8000/v1   `mens serve run=…` or `vllm serve MODEL`
    lane.distill.teacher_model=NAME     the model the requests name (null: the server's first
                                        /v1/models id)
    lane.distill.teacher_api_key_env=VAR   the NAME of the variable holding its bearer key; the
                                        key itself is read from the environment when the run
                                        connects and is never written anywhere

A server answers log-probs of given tokens, not whole next-token distributions, so the loss is
the sampled-token reverse KL (mens.objective.distill.sampled_reverse_kl_loss), not the JSD.

Scoring is vLLM's: one /v1/completions request per batch of rows, the rows as token ids (no
text round trip can change a token), `prompt_logprobs: 0` (each prompt token's log-prob after
the tokens before it; mens.serve.score answers it the same way), `max_tokens: 1` (vLLM and
mens serve generate at least one token; it is discarded), temperature 1 (prompt log-probs are
the raw model's in both servers; 1 keeps them so under vLLM's processed-logprobs modes too).
Through the official `openai` client, which carries the key and retries lost connections.
"""
from __future__ import annotations

import math
import os
import sys
import time

from mens.errors import ConfigError

SCORE_TIMEOUT_S = 600.0     # one batch of rows on a busy server
KEY = "lane.distill.teacher_url"


class ServedTeacher:
    """The client of one served teacher: `logps(rows)` → each row's per-token log-probs."""

    def __init__(self, distill):
        import openai

        self.url = str(distill.teacher_url).rstrip("/")
        env = distill.teacher_api_key_env
        key = os.environ.get(env, "") if env else ""
        if env and not key:
            raise ConfigError(f"lane.distill.teacher_api_key_env={env} names an environment "
                              f"variable that is unset or empty: `export {env}=<key>` first (or "
                              f"drop the key if the teacher's server takes none).",
                              key="lane.distill.teacher_api_key_env")
        # a server without keys takes any bearer: the client insists on sending one
        self.client = openai.OpenAI(base_url=self.url, api_key=key or "none",
                                    timeout=SCORE_TIMEOUT_S, max_retries=2)
        self.model = distill.teacher_model or self._first_model()
        self.score_s = math.nan     # the last scoring round trip (telemetry: teacher/score_s)
        print(f"mens: note: distill: the teacher is served: {self.model} at {self.url}",
              file=sys.stderr)

    def _call(self, fn, what: str):
        import openai

        try:
            return fn()
        except openai.AuthenticationError:
            raise ConfigError(f"{KEY}={self.url} refused the key ({what}): set "
                              f"lane.distill.teacher_api_key_env to the name of the variable "
                              f"holding the server's key.",
                              key="lane.distill.teacher_api_key_env") from None
        except openai.APIConnectionError as e:
            raise ConfigError(f"{KEY}={self.url}: no answer ({what}: {e}). Start the teacher's "
                              f"server (e.g. `python -m mens.serve run=<teacher>`), or fix the "
                              f"URL (its OpenAI base, ending in /v1).", key=KEY) from None
        except openai.APIStatusError as e:
            raise ConfigError(f"{KEY}={self.url} answered {e.status_code} ({what}): "
                              f"{str(e.message)[:800]} — a teacher's server must score token-id "
                              f"prompts with vLLM's `prompt_logprobs` on /v1/completions (mens "
                              f"serve and vLLM do).", key=KEY) from None

    def _first_model(self) -> str:
        models = self._call(lambda: self.client.models.list().data, "/v1/models")
        if not models:
            raise ConfigError(f"{KEY}={self.url} serves no model: name one with "
                              f"lane.distill.teacher_model.", key="lane.distill.teacher_model")
        return models[0].id

    def logps(self, rows: list[list[int]]) -> list[list[float]]:
        """Per row of token ids: the teacher's log-prob of tokens 1 … len−1, each after the
        tokens before it (no grad, no temperature), in one request."""
        t0 = time.perf_counter()
        resp = self._call(lambda: self.client.completions.create(
            model=self.model, prompt=rows, max_tokens=1, temperature=1.0,
            extra_body={"prompt_logprobs": 0}), "scoring")
        self.score_s = time.perf_counter() - t0
        choices = sorted((c.model_dump() for c in resp.choices), key=lambda c: c["index"])
        if len(choices) != len(rows) or any(c.get("prompt_logprobs") is None for c in choices):
            missing = any(c.get("prompt_logprobs") is None for c in choices)
            raise ConfigError(f"{KEY}={self.url} answered {len(choices)} choices for {len(rows)} "
                              f"rows{' without prompt_logprobs' if missing else ''}: a teacher's "
                              f"server must honour vLLM's `prompt_logprobs` on /v1/completions "
                              f"(mens serve and vLLM do).", key=KEY)
        out = []
        for row, c in zip(rows, choices):
            got = c["prompt_logprobs"][1:]                 # the first token has no context
            if len(got) != len(row) - 1:
                raise ConfigError(f"{KEY}={self.url} scored {len(got) + 1} tokens of a row of "
                                  f"{len(row)}: it must score the token ids as sent.", key=KEY)
            out.append([float(entry[str(t)]["logprob"]) for t, entry in zip(row[1:], got)])
        return out

    def completion_logps(self, ids, mask, T: int):
        """(N, L) rows (left-padded prompt, completion right-padded to T), their mask → (N, T)
        the teacher's log-probs of each completion token, 0 past a row's end."""
        import torch

        real = [ids[r][mask[r].bool()].tolist() for r in range(ids.shape[0])]
        lengths = mask[:, -T:].sum(-1).tolist()              # each row's completion tokens
        scored = self.logps(real)
        out = torch.zeros(ids.shape[0], T, dtype=torch.float32, device=ids.device)
        for r, (lp, n) in enumerate(zip(scored, lengths)):
            if n:
                out[r, :n] = torch.tensor(lp[-n:], dtype=torch.float32)
        return out
