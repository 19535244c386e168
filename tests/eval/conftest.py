"""No test here reaches the Hugging Face hub: `mens eval` would probe it (one HEAD) before loading
lm-eval tasks, and tests talk to 127.0.0.1 only. HF_HUB_OFFLINE is set for each module here (the
environment, for the commands the tests start, and huggingface_hub's flag, read at import)."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module", autouse=True)
def hub_offline():
    from huggingface_hub import constants

    saved_env, saved_flag = os.environ.get("HF_HUB_OFFLINE"), constants.HF_HUB_OFFLINE
    os.environ["HF_HUB_OFFLINE"], constants.HF_HUB_OFFLINE = "1", True
    yield
    constants.HF_HUB_OFFLINE = saved_flag
    if saved_env is None:
        os.environ.pop("HF_HUB_OFFLINE", None)
    else:
        os.environ["HF_HUB_OFFLINE"] = saved_env
