"""Runtime LoRA loading made safe (issue #49, item 8), on a real server on 127.0.0.1 (mens's app
on uvicorn in a thread, over the tiny base): the adapter's path is read on the model thread, so
/health answers while a load waits on a slow disk; a Hub id is refused (nothing is downloaded);
`lora_name` is a usable model id; a request for an adapter unloaded while it waited is a 404;
and the server a GRPO run starts for itself wants a random key, which the run sends."""
from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

import httpx
import pytest
import torch

from serve_util import serving, tiny_slots, random_lora

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def slots():
    with tiny_slots() as s:
        yield s


@pytest.fixture(scope="module")
def url(slots):
    from mens.serve.openai_api import build_app
    with serving(build_app(slots, runtime_lora=True)) as u:
        yield u


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    return random_lora(tmp_path_factory.mktemp("adapter") / "a")


def post(url, route, body, status=200, timeout=60):
    r = httpx.post(f"{url}{route}", json=body, timeout=timeout)
    assert r.status_code == status, r.text
    return r.json()


def models(url) -> list[str]:
    return [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]]


def test_lora_names_must_be_usable_model_ids(url, adapter):
    for bad in ("", " ", "a b", "../up", "x" * 65, "café", "base", "-dash"):
        err = post(url, "/v1/load_lora_adapter", {"lora_name": bad, "lora_path": str(adapter)},
                   400)["error"]
        assert err["param"] == "lora_name", (bad, err)
    assert models(url) == ["base"]   # nothing was loaded under a name of the server's choosing


def test_a_hub_id_is_refused_and_nothing_is_downloaded(url, monkeypatch, tmp_path):
    # a "Hub" on 127.0.0.1 that accepts connections and never answers: a download from it would
    # hold whatever thread makes it (the event loop, before this fix) until the client's timeout
    hub = socket.create_server(("127.0.0.1", 0))
    seen = []

    def listen():
        try:
            seen.append(hub.accept())
        except OSError:   # closed at the end of the test: nobody came
            pass
    threading.Thread(target=listen, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{hub.getsockname()[1]}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(k, raising=False)
    try:
        t0 = time.perf_counter()
        err = post(url, "/v1/load_lora_adapter", {"lora_name": "h", "lora_path": "org/adapter"},
                   400, timeout=8)["error"]
        took = time.perf_counter() - t0
        assert err["param"] == "lora_path" and "local directory" in err["message"], err
        assert "Hub repo id" in err["message"] and "serve.adapters" in err["message"]
        assert took < 5 and not seen, (took, seen)   # refused at once, the Hub never asked
    finally:
        hub.close()
    assert models(url) == ["base"]


def loading_now() -> bool:
    """Whether the server's model thread (in this process) is inside Slots.add: loading."""
    tid = next((t.ident for t in threading.enumerate() if t.name.startswith("mens-model")), None)
    frame = sys._current_frames().get(tid)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "add" and code.co_filename.endswith(os.path.join("serve", "slots.py")):
            return True
        frame = frame.f_back
    return False


def test_the_event_loop_answers_while_an_adapter_loads(url, adapter, tmp_path):
    # an adapter dir on a slow path: its weights file is a named pipe, whose open waits for a
    # writer — this test — so the load stays under way for as long as the test likes. (PEFT's
    # .bin: Python's open lets go of the GIL while it waits; safetensors' open does not, and
    # would stop every thread of the process, the test's too.)
    slow = tmp_path / "slow"
    slow.mkdir()
    shutil.copy(adapter / "adapter_config.json", slow)
    fifo = slow / "adapter_model.bin"
    os.mkfifo(fifo)
    with ThreadPoolExecutor(1) as pool:
        loading = pool.submit(httpx.post, f"{url}/v1/load_lora_adapter",
                              json={"lora_name": "slow", "lora_path": str(slow)}, timeout=120)
        try:
            deadline = time.time() + 60
            while not loading_now():
                assert time.time() < deadline and not loading.done(), \
                    loading.result().text if loading.done() else "the load never started"
                time.sleep(0.05)
            for route in ("/health", "/v1/models"):
                t0 = time.perf_counter()
                r = httpx.get(f"{url}{route}", timeout=10)
                took = time.perf_counter() - t0
                assert r.status_code == 200 and took < 2.0, (route, took)
            assert loading_now() and not loading.done()
        finally:   # open the pipe's other end and close it: it delivers no weights
            deadline, fd = time.time() + 60, None
            while fd is None and time.time() < deadline and not loading.done():
                try:
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as e:   # ENXIO: no reader yet
                    assert e.errno == errno.ENXIO, e
                    time.sleep(0.05)
            if fd is not None:
                os.close(fd)
        r = loading.result()
    assert r.status_code == 400 and r.json()["error"]["param"] == "lora_path", r.text
    assert models(url) == ["base"]
    post(url, "/v1/chat/completions", {"model": "base", "messages": MSGS, "max_tokens": 2})


def test_a_request_for_an_adapter_unloaded_while_it_waits_is_a_404(url, slots, adapter):
    for name in ("w1", "w2"):
        post(url, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(adapter)})
    gate = threading.Event()
    # the model thread busy, as under a long generation: what follows queues behind it
    slots.run(gate.wait)
    unload = lambda: httpx.post(f"{url}/v1/unload_lora_adapter",  # noqa: E731
                                json={"lora_name": "w1"}, timeout=120)
    try:
        with ThreadPoolExecutor(4) as pool:
            # two unloads of one adapter: the one that comes second is a 409 at once (not a
            # second unload queued to fail), which also says the first is queued
            pair = [pool.submit(unload), pool.submit(unload)]
            done, _ = wait(pair, timeout=10, return_when=FIRST_COMPLETED)
            asking = pool.submit(httpx.post, f"{url}/v1/chat/completions", json={
                "model": "w1", "messages": MSGS, "max_tokens": 2}, timeout=120)
            streaming = pool.submit(httpx.post, f"{url}/v1/chat/completions", json={
                "model": "w1", "messages": MSGS, "max_tokens": 2, "stream": True}, timeout=120)
            for _ in range(400):   # both requests admitted: queued behind the unload
                if httpx.get(f"{url}/health", timeout=10).json()["queue"]["in_flight"] == 2:
                    break
                time.sleep(0.05)
            gate.set()
            answer, streamed = asking.result(), streaming.result()
            again = next(iter(done)).result() if done else None
            unloaded = next(f for f in pair if f not in done).result()
    finally:
        gate.set()
    assert answer.status_code == 404, answer.text
    err = answer.json()["error"]
    assert err["param"] == "model" and err["code"] == "model_not_found" and "w1" in err["message"]
    # a stream has sent its 200 before the model thread gets to it: the error is its event
    events = [e[len("data: "):] for e in streamed.text.split("\n\n") if e]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["error"] == err, streamed.text
    assert unloaded.status_code == 200, unloaded.text
    assert again is not None and again.status_code == 409, again and again.text
    assert again.json()["error"]["code"] == "unload_in_progress"
    assert models(url) == ["base", "w2"]
    post(url, "/v1/chat/completions", {"model": "w2", "messages": MSGS, "max_tokens": 2})
    post(url, "/v1/unload_lora_adapter", {"lora_name": "w2"})


@pytest.mark.slow   # a `mens serve` subprocess: torch's import and a base load on 2 cores
def test_the_server_a_grpo_run_starts_wants_its_random_key(tmp_path):
    from mens.config.compose import compose
    from mens.model.load import load_model
    from mens.objective.rollout_server import RolloutServer
    from mens.plan.spec import compile_run

    spec = compile_run(compose(["+hw=cpu", "lane=grpo", "train.seq_len=256",
                                "lane.grpo.generation=server"]), "plan")[0]
    model, _ = load_model(spec)
    server = RolloutServer.start(spec, model)
    try:
        proc = Path("/proc") / str(server.proc.pid)
        named = [a.partition(b"=")[2] for a in (proc / "cmdline").read_bytes().split(b"\0")
                 if a.startswith(b"serve.api_key_env=")]
        assert named, "the server was started without serve.api_key_env: no key"
        environ = dict(v.partition(b"=")[::2] for v in (proc / "environ").read_bytes().split(b"\0"))
        key = environ[named[0]]
        assert len(key) >= 32
        for route, body in (("/v1/load_lora_adapter", {"lora_name": "mine", "lora_path": "/"}),
                            ("/v1/unload_lora_adapter", {"lora_name": "initial"})):
            r = httpx.post(f"{server.url}{route}", json=body, timeout=60)   # no key: refused
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        with torch.no_grad():   # an optimizer step: the run reloads its adapter, with the key
            next(p for n, p in model.named_parameters() if "lora_B" in n).add_(0.01)
        assert server.sync(model) > 0
        assert [m["id"] for m in server.get("/v1/models")["data"]] == ["base", "policy-r0-1"]
        # the key is in the server's environment only: not its command line, not a file or log
        assert key not in (proc / "cmdline").read_bytes()
        files = [f for f in server.folder.rglob("*") if f.is_file()]
        assert any(f.name == "serve.log" for f in files) and \
            any(f.name == "overrides.yaml" for f in files)
        assert not [f for f in files if key in f.read_bytes()]
    finally:
        server.close()
