"""Pull what was pushed: `adapter=org/name[@rev]` (or a dir) from tests/hub_server.py — a real
HTTP server on 127.0.0.1 standing in for the Hub — with the real huggingface_hub client, PEFT and
training. The served adapter is the session's tiny LoRA run's (conftest `tiny_run`), so its bytes
and its eval loss are known. Each test has its own hub cache under tmp_path.

The stand-in speaks no Xet: subprocesses get HF_HUB_DISABLE_XET=1 (huggingface_hub reads it at
import); downloads never ask for Xet here anyway, as the server advertises none.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from hub_server import HubServer, Repo, files_in, offline
from train_util import FAST_TRAIN

from mens.errors import ConfigError
from mens.source.hub import ADAPTER_FILES, fetch_adapter

REPO = "me/tiny-vox"
DECOYS = {"checkpoints/last.ckpt": b"ckpt" * 1000, "adapter.gguf": b"GGUF" + b"\0" * 1000,
          "optimizer.pt": b"opt" * 1000}


@pytest.fixture(scope="module")
def adapter_files(tiny_run) -> dict[str, bytes]:
    """The pushed adapter: the tiny run's adapter/ as a repo holds it, beside files never pulled."""
    files = {p.name: p.read_bytes() for p in (tiny_run / "adapter").iterdir() if p.is_file()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(files)
    return files


@pytest.fixture
def hub(tmp_path, monkeypatch, adapter_files):
    home = tmp_path / "hf"
    with HubServer({REPO: Repo({**adapter_files, **DECOYS})}) as server:
        for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                    "HUGGINGFACE_HUB_CACHE"):
            monkeypatch.delenv(var, raising=False)
        for var, value in {"HF_ENDPOINT": server.url, "HF_HOME": str(home),
                           "HF_HUB_CACHE": str(home / "hub"), "HF_HUB_DISABLE_XET": "1",
                           "XDG_CACHE_HOME": str(tmp_path / "xdg"),   # never the user's cache
                           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}.items():
            monkeypatch.setenv(var, value)
        yield server


def test_fetch_takes_the_adapter_files_only_and_then_the_cache(hub, adapter_files, tiny_run,
                                                              monkeypatch):
    path, src = fetch_adapter(REPO)
    sha = hub.repos[REPO].sha
    assert src == {"repo_id": REPO, "revision": None, "commit": sha} and path.name == sha
    assert files_in(path) == set(adapter_files) == hub.transferred()
    assert set(adapter_files) <= set(ADAPTER_FILES)
    for name, data in adapter_files.items():
        assert (path / name).read_bytes() == data, name
    hub.log.clear()
    assert fetch_adapter(REPO) == (path, src)                      # cache first: no request
    assert fetch_adapter(f"{REPO}@{sha}") == (path, {**src, "revision": sha})
    offline(monkeypatch)
    assert fetch_adapter(REPO)[0] == path
    assert hub.log == []
    # a local dir is taken as it is
    assert fetch_adapter(str(path)) == (path.resolve(), {"path": str(path.resolve())})
    assert fetch_adapter(str(tiny_run))[0] == (tiny_run / "adapter").resolve()   # a run dir


def test_a_revision_pins_the_snapshot(hub, adapter_files, tmp_path, monkeypatch):
    old = hub.repos[REPO].sha
    path, src = fetch_adapter(f"{REPO}@{old}")
    assert path.name == src["commit"] == old
    # main moves on: a new card; a fresh cache gets the new commit, the pinned ref the old one
    hub.repos[REPO] = Repo({**adapter_files, "README.md": b"# tiny-vox v2\n"})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "fresh" / "hub"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "fresh"))   # mens walks $HF_HOME/hub too
    new_path, new = fetch_adapter(REPO)
    assert new["commit"] == hub.repos[REPO].sha != old
    assert (new_path / "README.md").read_bytes() == b"# tiny-vox v2\n"
    with pytest.raises(ConfigError) as e:                          # not served any more
        fetch_adapter(f"{REPO}@{old}")
    assert e.value.key == "adapter" and f"revision '{old}' does not exist" in e.value.message
    assert "adapter=ORG/NAME@REV" in e.value.message
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))   # the first cache still has it
    hub.log.clear()
    assert fetch_adapter(f"{REPO}@{old}") == (path, {**src})
    assert (path / "README.md").read_bytes() == adapter_files["README.md"] and hub.log == []


def test_what_it_refuses_in_one_paragraph(hub, tmp_path, monkeypatch):
    cases = {"me/absent": "was not found", "not a ref": "neither a directory here nor a Hub",
             str(tmp_path): "a directory without a PEFT adapter", f"{REPO}@": "neither"}
    for ref, said in cases.items():
        with pytest.raises(ConfigError) as e:
            fetch_adapter(ref)
        assert e.value.key == "adapter" and said in e.value.message, (ref, e.value.message)
    offline(monkeypatch)
    hub.log.clear()
    with pytest.raises(ConfigError) as e:
        fetch_adapter(REPO)
    msg = e.value.message
    assert e.value.key == "adapter" and "HF_HUB_OFFLINE=1 forbids downloading" in msg
    assert "hf download me/tiny-vox" in msg and "`adapter=/dir`" in msg and hub.log == []


def test_the_adapter_must_fit_the_rung(hub, compose):
    from mens.plan.spec import compile_run
    with pytest.raises(ConfigError) as e:
        compile_run(compose(["+hw=cpu", "+rung=0.6b", f"adapter={REPO}"]), "plan")
    msg = e.value.message
    assert e.value.key == "adapter" and "does not fit rung 0.6b (Qwen/Qwen3-0.6B)" in msg
    assert "trained on" in msg and "`+rung=tiny`" in msg       # both bases named
    with pytest.raises(ConfigError) as e:
        compile_run(compose(["+hw=cpu", f"adapter={REPO}", "train.init_adapter=/x"]), "plan")
    assert e.value.key == "adapter" and "keep one" in e.value.message


def test_training_continues_from_a_hub_adapter_and_pins_it(hub, tiny_run, tmp_path,
                                                            monkeypatch):
    from safetensors.torch import load_file

    run = tmp_path / "run"
    # lr 1e-12: one step leaves the weights where they started, so the run's adapter shows
    # what training started from (a fresh LoRA starts with lora_B = 0)
    p = subprocess.run([sys.executable, "-m", "mens", *FAST_TRAIN, f"adapter={REPO}",
                        "train.max_steps=1", "lane.optimizer.lr=1e-12", f"hydra.run.dir={run}"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    sha = hub.repos[REPO].sha
    spec = yaml.safe_load((run / "spec.yaml").read_text())
    assert spec["adapter"] == f"{REPO}@{sha}"
    assert spec["train"]["init_adapter"].endswith(f"models--me--tiny-vox/snapshots/{sha}")
    pushed = load_file(str(tiny_run / "adapter" / "adapter_model.safetensors"))
    got = load_file(str(run / "adapter" / "adapter_model.safetensors"))
    assert got.keys() == pushed.keys()
    assert max((got[k] - pushed[k]).abs().max().item() for k in got) < 1e-6
    assert max(pushed[k].abs().max().item() for k in pushed if "lora_B" in k) > 1e-3
    before = json.loads((tiny_run / "summary.json").read_text())
    after = json.loads((run / "summary.json").read_text())
    assert abs(after["eval_loss_adapter"] - before["eval_loss_adapter"]) < 1e-3
    assert after["eval_loss_adapter"] < after["eval_loss_base"]
    # a rerun / resume composes the pinned ref again and finds it in the cache, offline
    from mens.plan.spec import compile_run, load_rerun
    offline(monkeypatch)
    hub.log.clear()
    cfg = load_rerun(str(run))
    assert cfg.adapter == f"{REPO}@{sha}" and cfg.train.init_adapter is None
    again, _ = compile_run(cfg, "plan")
    assert again.train.init_adapter == spec["train"]["init_adapter"] and hub.log == []


def test_eval_export_and_serve_take_a_hub_adapter(hub, tiny_run, tmp_path, compose):
    from mens.eval.run import evaluate
    from mens.serve.generate import GenRequest, generate
    from mens.serve.slots import load_from_config

    # eval: the tiny base against the pulled adapter, on two held-out prompts
    ev = evaluate(compose(["+hw=cpu", "logger=csv", f"adapter={REPO}", "eval.max_prompts=2",
                           "eval.k=1", "eval.max_new_tokens=8", "eval.collateral=false"]),
                  tmp_path / "ev")
    sha = hub.repos[REPO].sha
    assert ev["models"] == ["base", "tuned"] and ev["adapter"] == f"{REPO}@{sha}"
    loss = next(r for r in ev["rows"] if r["name"] == "vox_lang/loss")
    assert loss["tuned"]["value"] < loss["base"]["value"] and loss["n"] == 2

    # export: the adapter as GGUF, named after the repo, its source recorded
    p = subprocess.run([sys.executable, "-m", "mens.export", f"adapter={REPO}",
                        "export.gguf=[]", "export.merged=false", "export.base_gguf=null",
                        "export.modelfile=false"], capture_output=True, text=True, cwd=tmp_path,
                       timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    out = tmp_path / "export" / "tiny-vox"
    m = json.loads((out / "export.json").read_text())
    assert [f["path"] for f in m["files"]] == ["adapter.gguf"] and m["source_run"] is None
    assert m["source_adapter"]["commit"] == sha and m["merge"]["adapter"]["r"] == 16
    from gguf import GGUFReader
    f = GGUFReader(out / "adapter.gguf").fields
    assert (f["general.type"].contents(), f["adapter.lora.alpha"].contents()) == ("adapter", 32.0)

    # serve: `adapter=` and `serve.adapters=[NAME=org/name]` become slots that answer
    cfg = compose(["+hw=cpu", f"adapter={REPO}", f"serve.adapters=['again={REPO}@{sha}']",
                   "serve.device=cpu", "serve.dtype=fp32"])
    slots = load_from_config(cfg)
    try:
        assert set(slots.slots) == {"base", "tiny-vox", "again"}
        assert slots.slots["tiny-vox"].path.name == sha
        ids = tuple(slots.encode_chat([{"role": "user", "content": "hello"}]))
        res = generate(slots, slots.slots["tiny-vox"], GenRequest(ids, max_tokens=4,
                                                                  temperature=0.0))
        assert res.completion_tokens >= 1 and res.finish_reason in ("stop", "length")
    finally:
        slots.close()


def test_a_hub_base_and_a_hub_adapter_evaluate_together(hub, tmp_path, compose):
    """The issue's own form: `+rung=hf rung.repo_id=<base> adapter=<org/name>`, both pulled from
    the stand-in Hub (the base: the embedded tiny model's files, as a repo would hold them)."""
    from mens.eval.run import evaluate
    from mens.resources import ASSETS

    hub.repos["me/tiny-base"] = Repo({p.name: p.read_bytes() for p in (ASSETS / "tiny").iterdir()
                                      if p.is_file()})
    ev = evaluate(compose(["+hw=cpu", "logger=csv", "+rung=hf", "rung.repo_id=me/tiny-base",
                           f"adapter={REPO}", "eval.max_prompts=2", "eval.k=1",
                           "eval.max_new_tokens=8", "eval.collateral=false"]), tmp_path / "ev")
    assert ev["rung"] == "tiny-base" and ev["adapter"] == f"{REPO}@{hub.repos[REPO].sha}"
    loss = next(r for r in ev["rows"] if r["name"] == "vox_lang/loss")
    assert loss["tuned"]["value"] < loss["base"]["value"]
    # the base came from the stand-in: its weights were transferred, the adapter's decoys never
    assert "model.safetensors" in hub.transferred() and not set(DECOYS) & hub.transferred()


def test_serve_pulls_a_hub_base_and_a_hub_adapter(hub, tmp_path, compose):
    from mens.resources import ASSETS
    from mens.serve.slots import load_from_config

    hub.repos["me/tiny-base"] = Repo({p.name: p.read_bytes() for p in (ASSETS / "tiny").iterdir()
                                      if p.is_file()})
    slots = load_from_config(compose(["+hw=cpu", "+rung=hf", "rung.repo_id=me/tiny-base",
                                      f"adapter={REPO}", "serve.device=cpu", "serve.dtype=fp32"]))
    try:
        assert set(slots.slots) == {"base", "tiny-vox"}
    finally:
        slots.close()
    assert "model.safetensors" in hub.transferred()
