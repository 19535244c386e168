"""Offline mode has one owner in mens (mens.source.hub.offline_by), and its rule is
huggingface_hub's own: the truth table is taken from huggingface_hub.constants itself, re-imported
under each environment in a child process (it reads the variables once, at import). Issue #37:
mens had two helpers, one that ignored TRANSFORMERS_OFFLINE and one that let it override
HF_HUB_OFFLINE=0 — so planning could schedule a download that the fetch then refused."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mens.errors import ConfigError

NAMES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
CASES = [(None, None), ("1", None), (None, "1"), ("0", "1"), ("", "1"), ("1", "0"),
         ("true", None), (None, "YES"), ("on", "0"), ("no", None), (None, "false")]


def _hf_says() -> list[bool]:
    """huggingface_hub.constants.HF_HUB_OFFLINE for each case, from the library itself."""
    code = f"""
import importlib, json, os
import huggingface_hub.constants as C
out = []
for case in {CASES!r}:
    for name, value in zip({NAMES!r}, case):
        os.environ.pop(name, None)
        if value is not None:
            os.environ[name] = value
    out.append(importlib.reload(C).HF_HUB_OFFLINE)
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if k not in NAMES}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_mens_reads_offline_as_huggingface_hub_does(monkeypatch):
    from mens.source import hub, resolve

    assert resolve.offline is hub.offline                     # one owner
    ours = []
    for case in CASES:
        for name, value in zip(NAMES, case):
            monkeypatch.delenv(name, raising=False)
            if value is not None:
                monkeypatch.setenv(name, value)
        ours.append(hub.offline())
        by = hub.offline_by()
        assert (by is not None) == ours[-1] and (by is None or by.split("=", 1)[1] in case)
    theirs = _hf_says()
    assert ours == theirs, list(zip(CASES, ours, theirs))
    assert theirs.count(True) >= 4 and theirs.count(False) >= 4   # both answers exercised


def test_transformers_offline_alone_stops_planning_from_scheduling_a_download(
        compile_run, tmp_path, monkeypatch):
    """Planning (mens.source.resolve) and fetching (mens.source.hub) now agree: with only
    TRANSFORMERS_OFFLINE=1, a missing base is refused at plan time with the way out, naming
    the variable, instead of "downloaded after the plan fits"."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    with pytest.raises(ConfigError) as e:
        compile_run("+hw=cpu", "+rung=0.6b", purpose="train")
    assert "hf download Qwen/Qwen3-0.6B" in e.value.message
    assert "TRANSFORMERS_OFFLINE=1" in e.value.message
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")                 # it wins, as in huggingface_hub
    spec, _ = compile_run("+hw=cpu", "+rung=0.6b", purpose="train")
    assert any("downloaded after the plan fits" in n for n in spec.notes)
