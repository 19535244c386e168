"""A new objective is one module + one option file + its tests (issue #42): a toy objective —
SFT's loss times lane.toy.scale — declared in one module written to tmp (its section, its
range, its card, its training class), its option file tmp/conf/lane/toy.yaml (the user's
./conf), registered with one line (mens.config.cards.register), composed with Hydra and
trained 2 steps on the tiny rung with a real Lightning Trainer (mens.train.run.train_run).

A plug-in outside mens can be one module: nothing below it in a package order. mens's own
objectives keep the card (mens.config.cards.<name>) apart from the training module
(mens.objective.<name>): config, data and plan import no torch and sit below mens.objective.
It runs in a child process: an objective registers before the schema is built (this session's
schema is built already), and registering after that is refused."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from train_util import FAST_TRAIN

TESTS = Path(__file__).resolve().parent.parent

TOY = '''
"""The toy objective: SFT's loss scaled by lane.toy.scale."""
from dataclasses import dataclass

from mens.config.card import Card, StepCost
from mens.config.ranges import pos


@dataclass
class ToyConfig:
    scale: float = 1.0               # multiplies SFT's loss


RANGES = {"scale": pos("the loss's multiplier", "1.0")}
CARD = Card("toy", "chat", (), lambda lane: 1, "none", False, (),
            lambda g, ref: StepCost((1,), where="toy_objective.py: one packed row"),
            train="toy_objective:Toy", config=ToyConfig, ranges=RANGES)


def __getattr__(name):   # the training class, built on use: mens.objective pulls torch
    if name != "Toy":
        raise AttributeError(name)
    from mens.objective.sft import Sft

    class Toy(Sft):
        name = "toy"

        def step(self, ctx, batch):
            loss, logged = ctx.lm_loss(batch)
            scale = float(self.lane.toy.scale)
            return loss * scale, {"loss": logged * scale}
    return Toy
'''

OPTION = """# the toy objective on LoRA
defaults: [lora, _self_]
name: toy
objective: toy
toy: {scale: 0.5}
"""

def _child(tmp_path, overrides, out):
    code = ("import json, sys\n"
            "import mens.config.cards, toy_objective\n"
            "mens.config.cards.register(toy_objective.CARD)   # the one line that registers it\n"
            "from mens.config.compose import compose\n"
            "from mens.errors import ConfigError\n"
            "from mens.plan.spec import compile_run\n"
            "try:\n"
            f"    cfg = compose({overrides!r})\n"
            "except ConfigError as e:\n"
            "    print(json.dumps({'error': str(e)})); sys.exit(0)\n"
            "spec, plan = compile_run(cfg, 'train')\n"
            "from mens.train.run import train_run\n"
            f"s = train_run(spec, plan, {str(out)!r})\n"
            "print(json.dumps({k: s[k] for k in ('steps', 'lane', 'objective')}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_toy_objective_is_one_module_and_one_option_file(tmp_path):
    (tmp_path / "toy_objective.py").write_text(TOY)
    (tmp_path / "conf" / "lane").mkdir(parents=True)
    (tmp_path / "conf" / "lane" / "toy.yaml").write_text(OPTION)
    fast = [*FAST_TRAIN, "train.max_steps=2", "train.eval_max_records=2", "lane=toy"]

    bad = _child(tmp_path, [*fast, "lane.toy.scale=-1"], tmp_path / "bad")   # its range holds
    assert "lane.toy.scale=-1" in bad["error"] and "positive" in bad["error"]

    out = _child(tmp_path, fast, tmp_path / "run")
    assert out == {"steps": 2, "lane": "lora-toy", "objective": "toy"}
    assert (tmp_path / "run" / "adapter").is_dir()


def test_registering_after_the_schema_is_built_is_refused():
    import pytest

    import mens.config.schema  # noqa: F401  (the schema is built: the registry was read)
    from mens.config.card import Card
    from mens.config.cards import register

    with pytest.raises(RuntimeError, match="before mens.config.schema is imported"):
        register(Card("late", "chat", (), lambda lane: 1, "none", False, ()))
