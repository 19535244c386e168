"""`mens demo` / `make demo` (`python -m mens.cli.demo`) [training overrides]: the round trip in
one command.

Reuses the newest finished LoRA run under outputs/ (or trains the tiny default with the given
overrides when there is none), serves its base and adapter with `python -m mens.serve`, asks
both the same held-out prompts through the HTTP API, and prints the answers side by side.
No Hydra app of its own (its run dirs are the children's): mens.cli.app's `command` gives it the
printer and exit codes of every command; the overrides are composed first, so a bad one exits 2
here, before anything is reused, trained or served.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from mens.cli.app import command
from mens.errors import EXIT_OK, RunFailed
from mens.run.rundir import RunDir

PROMPTS, MAX_TOKENS = 3, 48


def latest_run(root: Path = Path("outputs")) -> Path | None:
    """The newest run dir (RunDir.latest) at outputs/<date>/<time>/ with summary.json
    (finished) and adapter/ (servable as a slot)."""
    return RunDir.latest(root, marker=RunDir.SUMMARY, depths=(2,), calibration=True,
                         where=lambda rd: rd.artifact_kind == RunDir.ADAPTER)


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def _wait(proc: subprocess.Popen, info: Path, timeout: float = 300) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RunFailed(f"mens demo: the server exited with {proc.returncode}")
        if info.is_file():
            url = json.loads(info.read_text())["url"]
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5).close()
                return url
            except OSError:
                pass
        time.sleep(0.3)
    raise RunFailed("mens demo: the server did not come up")


def main(argv: list[str] | None = None) -> int:
    return command(_demo, list(sys.argv[1:] if argv is None else argv))


def _demo(argv: list[str]) -> int:
    from rich.console import Console
    from rich.table import Table

    from mens.config.compose import compose

    compose(argv)   # the training overrides, checked (exit 2) before a run is reused or trained
    console = Console()
    run = latest_run()
    if run is None:
        console.print("[bold]mens demo:[/] no finished run under outputs/: training the tiny default")
        trained = subprocess.run([sys.executable, "-m", "mens", *argv]).returncode
        if trained:   # the child printed its one paragraph; its code is the outcome
            return trained
        run = latest_run()
        if run is None:
            raise RunFailed("mens demo: training finished without an adapter (a full-lane run?)")
    else:
        console.print(f"[bold]mens demo:[/] reusing {run}")
    spec_spoke = _spoke_of(run)
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([sys.executable, "-m", "mens.serve", f"run={run}", "serve.port=0",
                                 f"hydra.run.dir={tmp}"])
        try:
            url = _wait(proc, Path(tmp) / "serve.json")
            table = Table(title=f"{run.name} ({spec_spoke}) through {url}/v1/chat/completions, "
                                f"greedy, ≤{MAX_TOKENS} tokens", show_lines=True)
            for col in ("prompt", "base", f"adapter ({run.name})"):
                table.add_column(col, overflow="fold", ratio=1)
            for msgs in _prompts(spec_spoke):
                answers = [_post(f"{url}/v1/chat/completions",
                                 {"model": m, "messages": msgs, "max_tokens": MAX_TOKENS,
                                  "temperature": 0})["choices"][0]["message"]["content"]
                           for m in ("base", run.name)]
                table.add_row(msgs[-1]["content"], *answers)
            console.print(table)
        finally:
            proc.terminate()   # SIGTERM: uvicorn shuts down gracefully, quietly
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return EXIT_OK


def _spoke_of(run: Path) -> str:
    return RunDir(run).read_spec()["spoke"]["name"]


def _prompts(spoke: str) -> list[list[dict]]:
    from mens.data.corpus import load_eval
    from mens.data.formats import kind
    from mens.config.options import load_option

    out = []
    for r in load_eval(load_option("spoke", spoke)):
        if kind(r) == "chat":
            msgs = r["messages"]
            last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
            out.append(msgs[:last_user + 1])
        if len(out) == PROMPTS:
            break
    return out


if __name__ == "__main__":
    sys.exit(main())
