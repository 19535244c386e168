"""`mens afk` as a user runs it: real tiny trainings in child processes, a real SIGKILL of the
queue's process group mid-training, a real resume from the checkpoint; pause, abort, status;
the queue's refusals and its memory guard."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from afk.afk_util import (afk_args, checkpointed, items, kill_group, queue, rows, run, start,
                      train_steps, wait_for)

STEPS = 12   # enough steps that the kill lands between the first checkpoint and the end


def _steps(run_dir: str) -> int:
    """The run's optimizer steps (train.max_steps, or fewer when a small corpus's one epoch
    ends first)."""
    return json.loads((Path(run_dir) / "summary.json").read_text())["steps"]


def _trained_once(run_dir: str) -> None:
    """Finished; one TRAIN_START, no RESUME, each step once."""
    steps = _steps(run_dir)
    assert len(rows(run_dir, "TRAIN_START")) == 1 and not rows(run_dir, "RESUME")
    assert train_steps(run_dir) == list(range(1, steps + 1))


def _resumed(run_dir: str) -> None:
    """Killed mid-run, resumed from its checkpoint: one TRAIN_START, then a RESUME row, and the
    steps after it continue from the checkpoint to the end (not from 1)."""
    steps, tel = _steps(run_dir), rows(run_dir)
    assert [r["event"] for r in tel].count("TRAIN_START") == 1
    resume_at = next(n for n, r in enumerate(tel) if r["event"] == "RESUME")
    before = [r["step"] for r in tel[:resume_at] if r["event"] == "TRAIN_STEP"]
    ckpt = max(r["step"] for r in tel[:resume_at] if r["event"] == "CHECKPOINT")
    after = [r["step"] for r in tel[resume_at:] if r["event"] == "TRAIN_STEP"]
    assert ckpt >= 2 and before and before[-1] < steps
    assert after[0] == ckpt + 1 and after[-1] == steps == STEPS, (before, ckpt, after)


@pytest.mark.slow   # in `make test-slow` (CI runs it): keeps `make test` near 20 min
def test_pause_between_items_then_sigkill_mid_training_resumes(tmp_path):
    """Two cells: paused after the first; started again and SIGKILLed (queue and child, the
    whole process group) while the second trains; started again: the second resumes from its
    checkpoint and the first is not retrained."""
    q, cells = tmp_path / "afk", ["tiny/vox_lang", "tiny/mcp_tool_chain"]
    args = afk_args(q, cells, STEPS)
    proc = start(*args, cwd=tmp_path)
    wait_for(lambda: (q / "queue.json").is_file() and
             any(i["state"] == "running" for i in queue(q)["items"]), proc, "the first item")
    asked = run("pause", f"afk.dir={q}", cwd=tmp_path)
    assert asked.returncode == 0 and "pause asked" in asked.stdout
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, out + err
    assert "paused with 1 item(s) left" in out
    first, second = sorted(items(q).values(), key=lambda i: i["started"] or "~")
    assert first["state"] == "done" and second["state"] == "pending" and not second["started"]
    assert queue(q)["state"] == "paused"
    status = run("status", f"afk.dir={q}", cwd=tmp_path)
    assert status.returncode == 0 and "paused · no runner" in status.stdout
    assert f"{second['id']}" in status.stdout and "pending" in status.stdout

    proc = start(*args, cwd=tmp_path)
    wait_for(checkpointed(q, second["cell"]), proc, "a checkpoint of the second item")
    child = items(q)[second["cell"]]["steps"]["train"]["pid"]
    kill_group(proc)
    assert gone(child), "the training child outlived the SIGKILL of its process group"
    crashed = items(q)[second["cell"]]
    assert crashed["state"] == "running" and crashed["attempts"] == 1
    assert not (Path(crashed["run_dir"]) / "summary.json").exists()

    again = run(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{first['cell']}: done already" in again.stdout
    done = items(q)
    assert all(i["state"] == "done" for i in done.values())
    _trained_once(done[first["cell"]]["run_dir"])
    assert done[first["cell"]]["attempts"] == 1
    _resumed(done[second["cell"]]["run_dir"])
    b = done[second["cell"]]
    # the killed attempt left no exit code (its queue died with it); the second resumed
    assert b["attempts"] == 2 and b["exit_codes"] == [{"step": "train", "code": 0,
                                                       "mode": "resume"}]
    assert b["steps"]["train"]["mode"] == "resume" and b["steps"]["train"]["peak_rss_bytes"] > 0
    # the ladder now sees both cells trained: the default selection leaves them out
    from mens.afk.cells import default_cells
    from mens.config.compose import compose

    cfg = compose([f"afk.dir={q}", f"ladder.runs={q}", "afk.overrides=['+hw=cpu']"])
    todo = {f"{r}/{s}": st for r, s, st in default_cells(cfg)}
    assert set(cells).isdisjoint(todo) and todo["tiny/structured_shell"] == "TRAIN_NOT_RUN"


def gone(pid: int, timeout: float = 20) -> bool:
    """Exited (a zombie counts): a SIGKILLed torch process takes a moment to tear down."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_abort_checkpoints_the_running_item_and_stops(tmp_path):
    q = tmp_path / "afk"
    proc = start(*afk_args(q, ["tiny/structured_shell"], 200), cwd=tmp_path)
    wait_for(checkpointed(q, "tiny/structured_shell"), proc, "a checkpoint")
    asked = run("abort", f"afk.dir={q}", cwd=tmp_path)
    assert asked.returncode == 0
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, out + err
    [item] = queue(q)["items"]
    assert item["state"] == "paused" and "resumes it from its checkpoint" in item["reason"]
    assert item["exit_codes"] == [{"step": "train", "code": 130, "mode": "fresh"}]
    run_dir = Path(item["run_dir"])
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert rows(run_dir, "TRAIN_INTERRUPTED") and not (run_dir / "summary.json").exists()
    assert max(train_steps(run_dir)) < 200
    assert queue(q)["state"] == "aborted"
    status = run("status", f"afk.dir={q}", cwd=tmp_path)
    assert "aborted · no runner" in status.stdout and "train:130" in status.stdout


@pytest.mark.slow
def test_acceptance_three_cells_sigkill_during_the_second(tmp_path):
    """Issue #16's acceptance: three tiny cells, the queue killed with SIGKILL (with its
    child) during the second, started again: all three complete, the second resumed from its
    checkpoint, the first not retrained, the third trained once."""
    q = tmp_path / "afk"
    cells = ["tiny/vox_lang", "tiny/mcp_tool_chain", "tiny/structured_shell"]
    args = afk_args(q, cells, STEPS)
    proc = start(*args, cwd=tmp_path)

    def second_checkpointed() -> bool:
        if not (q / "queue.json").is_file():
            return False
        started = [i for i in queue(q)["items"] if i["started"]]
        return len(started) == 2 and checkpointed(q, max(started, key=lambda i: i["started"])
                                                  ["cell"])()
    wait_for(second_checkpointed, proc, "a checkpoint of the second item")
    kill_group(proc)
    before = items(q)
    states = sorted(i["state"] for i in before.values())
    assert states == ["done", "pending", "running"], states
    again = run(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    done = items(q)
    assert all(i["state"] == "done" for i in done.values())
    by_state = {i["state"]: c for c, i in before.items()}
    _trained_once(done[by_state["done"]]["run_dir"])
    _resumed(done[by_state["running"]]["run_dir"])
    _trained_once(done[by_state["pending"]]["run_dir"])


@pytest.mark.slow
def test_gate_then_promote_are_recorded(tmp_path):
    """afk.gate runs `mens gate` on the trained run (its verdict recorded from gate.json);
    afk.promote asks the server only when the gate passed, and no server answering is recorded
    on the item, not a failure of it."""
    from mens.run.receipt import receipt_status

    q = tmp_path / "afk"
    args = [a for a in afk_args(q, ["tiny/vox_lang"], 3) if a != "afk.gate=false"]
    res = run(*args, "gate.max_prompts=1", "gate.max_new_tokens=8", "gate.k=1",
              "gate.collateral=false", "afk.promote=true",
              "serve.port=9", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    [item] = queue(q)["items"]
    status, _ = receipt_status(item["run_dir"])
    assert item["state"] == "done" and item["steps"]["gate"]["status"] == status
    assert status in ("pass", "fail") and (Path(item["run_dir"]) / "gate.json").is_file()
    promote = item["steps"]["promote"]
    if status == "pass":
        assert promote["promoted"] is False and promote["code"] != 0   # nothing on port 9
    else:
        assert promote == {"skipped": "its gate did not pass"}


# --- cheap: no training ------------------------------------------------------------------
def test_default_selection_is_the_ladders_missing_cells_that_fit(tmp_path):
    from mens.afk.cells import default_cells
    from mens.config.compose import compose

    cfg = compose([f"afk.dir={tmp_path}", f"ladder.runs={tmp_path}",
                   "afk.overrides=['+hw=cpu','hw.memory_gb=4']"])
    todo = {f"{r}/{s}": st for r, s, st in default_cells(cfg)}
    assert todo["tiny/vox_lang"] == "TRAIN_NOT_RUN" and "32b/vox_lang" not in todo


def test_order_is_smallest_predicted_peak_first_interrupted_first(tmp_path):
    from mens.afk.queue import Queue

    q = Queue(tmp_path)
    q.add("8b/vox_lang", "8b", "vox_lang", 9 * 2**30, [])
    q.add("tiny/vox_lang", "tiny", "vox_lang", 2**28, [])
    mid = q.add("0.6b/vox_lang", "0.6b", "vox_lang", 2**31, [])
    q.add("1.7b/vox_lang", "1.7b", "vox_lang", 2**32, [])["state"] = "done"
    assert [i["cell"] for i in q.todo()] == ["tiny/vox_lang", "0.6b/vox_lang", "8b/vox_lang"]
    mid["state"] = "running"   # the item a crash interrupted resumes before the rest
    assert [i["cell"] for i in q.todo()][0] == "0.6b/vox_lang"
    again = q.add("tiny/vox_lang", "tiny", "vox_lang", 1, [])
    assert again["id"] == "tiny-vox_lang-2" and again["run_dir"].endswith("runs/tiny-vox_lang-2")


def test_bad_cells_and_values_exit_2_naming_the_key(tmp_path):
    bad = run(f"afk.dir={tmp_path}", "afk.cells=[tiny/no_such_spoke]", cwd=tmp_path)
    assert bad.returncode == 2 and "`afk.cells` has `tiny/no_such_spoke`" in bad.stderr
    bad = run(f"afk.dir={tmp_path}", "afk.cells=[vox_lang]", cwd=tmp_path)
    assert bad.returncode == 2 and "a cell is `rung/spoke`" in bad.stderr
    bad = run("status", "afk.nice=40", cwd=tmp_path)
    assert bad.returncode == 2 and "`afk.nice=40` is not valid" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "queue.json").exists()


def test_a_cell_that_does_not_fit_is_refused_and_never_started(tmp_path):
    q = tmp_path / "afk"
    res = run(f"afk.dir={q}", "afk.cells=[8b/vox_lang]",
              "afk.overrides=['+hw=cpu','hw.memory_gb=2','logger=csv']", cwd=tmp_path)
    assert res.returncode == 4, res.stdout + res.stderr
    [item] = queue(q)["items"]
    assert item["state"] == "failed" and "does not fit" in item["reason"]
    assert item["attempts"] == 0 and item["exit_codes"] == [{"step": "plan", "code": 3}]
    assert not Path(item["run_dir"]).exists()


def test_a_second_runner_on_the_same_queue_is_refused(tmp_path):
    from mens.afk.queue import Queue

    holder = Queue(tmp_path)
    holder.lock()
    try:
        res = run(f"afk.dir={tmp_path}", "afk.cells=[tiny/vox_lang]", cwd=tmp_path)
        assert res.returncode == 3 and "another `mens afk`" in res.stderr, res.stderr
        assert Queue(tmp_path).runner_alive()
    finally:
        holder.unlock()
    assert not Queue(tmp_path).runner_alive()


def test_memory_guard_kills_a_child_above_its_limit_and_priority_is_lowered(tmp_path):
    """A real child that grows past the limit is killed; a polite one runs niced."""
    from mens.afk.child import run_child

    grow = ("import time\nx = []\nwhile True:\n    x.append(bytearray(16 * 2**20))\n"
            "    time.sleep(0.01)\n")
    t0 = time.time()
    out = run_child([sys.executable, "-c", grow], tmp_path / "grow.log", 0, 300 * 2**20, 0.1,
                    lambda: False)
    assert out.stopped == "memory" and out.code == -9 and time.time() - t0 < 60
    assert 300 * 2**20 < out.peak_rss_bytes < 2 * 2**30
    nice = run_child([sys.executable, "-c", "import os; print('nice', os.nice(0))"],
                     tmp_path / "nice.log", 7, None, 0.1, lambda: False)
    assert nice.code == 0
    assert f"nice {min(19, os.nice(0) + 7)}" in (tmp_path / "nice.log").read_text()


def test_mens_afk_is_a_command(tmp_path, capsys):
    from mens.cli import main, usage

    assert "afk" in usage()
    assert main(["afk", "status", f"afk.dir={tmp_path}"]) == 0
    assert f"no queue in {tmp_path}" in capsys.readouterr().out
