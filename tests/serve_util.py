"""Helpers shared by the serve tests: adapter copies, and the real server in a subprocess."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx


@contextmanager
def tiny_slots(rung=None):
    """The tiny base (or `rung`, a rung mapping) in mens.serve's Slots on the CPU, closed after."""
    from mens.config.compose import compose
    from mens.serve.slots import Slots

    s = Slots(compose([]).rung if rung is None else rung, [], device="cpu", dtype="fp32")
    try:
        yield s
    finally:
        s.close()


def random_lora(out: Path) -> Path:
    """A LoRA adapter dir (r 4, q/v) on the tiny base with a random B: it changes the answers."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from mens.resources import ASSETS

    base = AutoModelForCausalLM.from_pretrained(str(ASSETS / "tiny"), dtype=torch.float32)
    m = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2, generator=torch.Generator().manual_seed(1))
    m.save_pretrained(str(out))
    return out


def adapter_copy(run: Path, dest: Path, scale_b: float) -> Path:
    """A run dir (spec.yaml + summary + adapter/) whose lora_B matrices are scaled: 0 makes an
    adapter that must act exactly as the base; 2 makes a different adapter on the same spoke."""
    from safetensors.torch import load_file, save_file

    dest.mkdir(parents=True)
    for name in ("spec.yaml", "summary.json", "telemetry.jsonl"):
        if (run / name).is_file():
            shutil.copy(run / name, dest / name)
    shutil.copytree(run / "adapter", dest / "adapter")
    path = dest / "adapter" / "adapter_model.safetensors"
    tensors = load_file(str(path))
    touched = [k for k in tensors if "lora_B" in k]
    assert touched, "no lora_B tensors in the adapter"
    for k in touched:
        tensors[k] = tensors[k] * scale_b
    save_file(tensors, str(path), metadata={"format": "pt"})
    return dest


@contextmanager
def running_server(tmp: Path, *overrides: str, timeout: float = 240.0):
    """`python -m mens.serve ...` on a free 127.0.0.1 port (serve.port=0); yields its URL and
    process. Always stopped at the end (SIGINT, then SIGKILL if it hangs)."""
    out = tmp / "serve_run"
    log = open(tmp / "serve.log", "w")
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mens.serve", "serve.port=0", f"hydra.run.dir={out}", *overrides],
        stdout=log, stderr=subprocess.STDOUT, cwd=tmp, env=env)
    try:
        url = _wait_ready(proc, out / "serve.json", tmp / "serve.log", timeout)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def _wait_ready(proc, info: Path, log: Path, timeout: float) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        if info.is_file():
            url = json.loads(info.read_text())["url"]
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
        time.sleep(0.3)
    raise AssertionError(f"server not ready in {timeout} s:\n{log.read_text()[-3000:]}")


def vox_prompts(n: int) -> list[list[dict]]:
    """The first n held-out vox_lang conversations, cut before the answer."""
    from mens.data.corpus import load_eval
    from mens.config.options import load_option

    out = []
    for r in load_eval(load_option("spoke", "vox_lang")):
        if "messages" in r:
            msgs = r["messages"]
            last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
            out.append(msgs[:last_user + 1])
        if len(out) == n:
            break
    return out


@contextmanager
def serving(app):
    """uvicorn on a free 127.0.0.1 port in a thread, as `python -m mens.serve` runs it."""
    import uvicorn

    from mens.serve.limits import h11_with_431
    from mens.serve.server import bind_socket

    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, http=h11_with_431(), lifespan="off",
                                           log_level="critical"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 300   # a loaded 2-core box can take its time
    while not server.started:
        assert thread.is_alive() and time.time() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


# --- a tiny model that calls a tool (issue #38) -----------------------------------------------
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False}}}
CITIES = ["Paris", "Berlin", "Tokyo", "Lima", "Oslo", "Rome", "Cairo", "Delhi", "Quito", "Seoul",
          "Dublin", "Madrid", "Vienna", "Prague", "Lisbon", "Athens", "Warsaw", "Nairobi",
          "Havana", "Bogota", "Hanoi", "Manila"]


def weather_records() -> list[dict]:
    """One OpenAI-format record per city: a question, then a call whose arguments are a JSON
    string and whose content is null (as an agent framework logs them)."""
    return [{"tools": [WEATHER], "messages": [
        {"role": "user", "content": f"What is the weather in {c}?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{i}", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": c})}}]}]}
        for i, c in enumerate(CITIES)]


def train_tool_run(out: Path, epochs: int = 5, lr: str = "1e-2") -> Path:
    """A real tiny LoRA run on weather_records() (data=file): 5 epochs of 6 steps at lr 1e-2
    make greedy decoding write a <tool_call> block that parses for unseen cities too (measured;
    3 epochs did not: the argument ran on). The city is not copied yet: the arguments are
    schema-valid, not right — exactness is mens eval's to measure."""
    from train_util import FAST_TRAIN

    from mens.config.compose import compose
    from mens.plan.output import plan_run
    from mens.train.run import train_run

    out.mkdir(parents=True, exist_ok=True)
    data = out / "weather.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in weather_records()))
    cfg = compose([*FAST_TRAIN, "data=file", f"data.path={data}", "data.collateral=none",
                   f"curriculum.epochs={epochs}", f"curriculum.caps=[{','.join(['10'] * epochs)}]",
                   f"lane.optimizer.lr={lr}"])
    spec, plan = plan_run(cfg, out / "run", "train")
    train_run(spec, plan, out / "run")
    return out / "run"
