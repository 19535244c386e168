"""The Serve panel's back end: one `python -m mens.serve` child on a free port, and the
studio's calls to it over HTTP — slot table (/v1/models, /admin/aliases), promote / rollback
(/admin/promote answers 409 for an ungated run: relayed as is), and the side-by-side chat (the
same prompt to two models, greedy; with `tools`, an answer may be tool calls, and `turn` sends
the conversation back with the tool results the user typed). The server's own rules decide;
the studio only asks."""
from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from mens.studio.procs import Procs, Refused, log_tail, new_run_dir

KEY = "serve"


class Serving:
    def __init__(self, root: Path, procs: Procs):
        self.root, self.procs, self.dir = root, procs, None

    def start(self, runs: list[Path]) -> dict:
        if self.procs.alive(KEY):
            raise Refused(409, "a server is already running: stop it first")
        if not runs:
            raise Refused(400, "name at least one finished run with an adapter to serve")
        self.dir = new_run_dir(self.root, "serve")
        argv = ["-m", "mens.serve", f"run={runs[0]}", "serve.port=0",
                f"hydra.run.dir={self.dir}"]
        if runs[1:]:
            argv.append("serve.adapters=[" + ",".join(f"'{r}'" for r in runs[1:]) + "]")
        self.procs.spawn("serve", argv, self.dir, key=KEY)
        return self.status()

    def stop(self) -> dict:
        if self.procs.alive(KEY):
            c = self.procs.children[KEY]["proc"]
            c.send_signal(2)
            try:
                c.wait(timeout=20)
            except Exception:
                c.kill()
        return self.status()

    def url(self) -> str:
        info = self.dir / "serve.json" if self.dir else None
        if not (self.procs.alive(KEY) and info and info.is_file()):
            raise Refused(409, "no server is up: start one in the Serve panel")
        return json.loads(info.read_text())["url"]

    def status(self) -> dict:
        if KEY not in self.procs.children:
            return {"state": "stopped"}
        c = self.procs.children[KEY]
        alive = c["proc"].poll() is None
        up = alive and (self.dir / "serve.json").is_file()
        out = {"state": "up" if up else "starting" if alive else "exited",
               "exit_code": c["proc"].poll(), "log": log_tail(c["log"], 1500)}
        if up:
            url = self.url()
            try:
                models = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
                aliases = httpx.get(f"{url}/admin/aliases", timeout=10).json()
            except httpx.HTTPError as e:
                return {**out, "state": "starting", "note": str(e)}
            out.update(url=url, models=[m["id"] for m in models], aliases=aliases["aliases"],
                       history=aliases["history"])
        return out

    def admin(self, action: str, body: dict) -> tuple[int, dict]:
        if action not in ("promote", "rollback"):
            raise Refused(404, "unknown admin action")
        spoke, slot = body.get("spoke"), body.get("slot")
        if not isinstance(spoke, str) or (slot is not None and not isinstance(slot, str)):
            raise Refused(400, "spoke (and optionally slot) as strings")
        payload = {"spoke": spoke, **({"slot": slot} if slot and action == "promote" else {})}
        r = httpx.post(f"{self.url()}/admin/{action}", json=payload, timeout=30)
        data = r.json()
        if r.status_code >= 400:
            return r.status_code, {"error": (data.get("error") or {}).get("message", r.text)}
        return 200, data

    def chat(self, body: dict) -> dict:
        """The same prompt to models a and b, greedy; with `tools` (OpenAI schemas) each answer
        may be tool calls, shown with the conversation that continues it (`turn`)."""
        prompt, models = body.get("prompt"), [body.get("a"), body.get("b")]
        if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > 8000:
            raise Refused(400, "prompt: a non-empty string (at most 8000 characters)")
        if not all(isinstance(m, str) and m for m in models):
            raise Refused(400, "a and b: the two models to ask (e.g. base and an adapter)")
        url = self.url()
        messages = [{"role": "user", "content": prompt}]
        # one after the other: the server runs one request at a time anyway
        answers = [self._ask(url, m, messages, body) for m in models]
        same = [(a["text"], a["tool_calls"]) for a in answers]
        return {"prompt": prompt, "answers": answers, "differ": same[0] != same[1]}

    def turn(self, body: dict) -> dict:
        """One more answer from `model` to a conversation the page holds: an answer's tool
        calls, then the tool results the user typed (`tool` messages). The server checks the
        conversation (a result that answers no call is its 400, relayed)."""
        model, messages = body.get("model"), body.get("messages")   # not a record: a request
        if not isinstance(model, str) or not model:
            raise Refused(400, "model: the model to ask")
        if not isinstance(messages, list) or not messages or len(json.dumps(messages)) > 64000:
            raise Refused(400, "messages: the conversation so far (a non-empty list)")
        return self._ask(self.url(), model, messages, body)

    @staticmethod
    def _ask(url: str, model: str, messages: list, body: dict) -> dict:
        max_tokens, tools = body.get("max_tokens", 48), body.get("tools")
        if not isinstance(max_tokens, int) or not 1 <= max_tokens <= 512:
            raise Refused(400, "max_tokens: 1-512")
        if tools is not None and not isinstance(tools, list):
            raise Refused(400, "tools: a list of OpenAI tool schemas")
        t0 = time.time()
        r = httpx.post(f"{url}/v1/chat/completions", timeout=300, json={
            "model": model, "temperature": 0, "max_tokens": max_tokens, "messages": messages,
            **({"tools": tools} if tools else {})})
        data = r.json()
        if r.status_code >= 400:
            raise Refused(r.status_code, f"{model}: {(data.get('error') or {}).get('message')}")
        choice = data["choices"][0]
        msg = {k: v for k, v in choice["message"].items() if v is not None}
        calls = [{"id": c["id"], "name": c["function"]["name"],
                  "arguments": c["function"]["arguments"]} for c in msg.get("tool_calls", [])]
        return {"model": model, "text": msg.get("content") or "", "tool_calls": calls,
                "finish_reason": choice["finish_reason"], "seconds": round(time.time() - t0, 2),
                "prompt_tokens": data["usage"]["prompt_tokens"],
                "messages": [*messages, msg]}
