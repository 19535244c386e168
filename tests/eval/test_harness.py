"""mens.eval.harness: lm-eval's own evaluator over mens's model loader, on the tiny run.

Two user tasks ship in tests/eval/tasks/ (a 20-item multiple choice, a 10-item generation task
with exact match). lm-eval hands `data_files` to `datasets` as written (relative to the cwd),
so `task_dir` copies them and writes the absolute JSONL paths in.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mens.errors import ConfigError

TASKS = Path(__file__).parent / "tasks"
MC, GEN = "mens_arith_mc", "mens_echo_gen"


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lm_eval_tasks")
    for stem in ("arith_mc", "echo_gen"):
        (out / f"{stem}.jsonl").write_bytes((TASKS / f"{stem}.jsonl").read_bytes())
        text = (TASKS / f"{stem}.yaml").read_text()
        assert f"test: {stem}.jsonl" in text
        (out / f"{stem}.yaml").write_text(text.replace(f"test: {stem}.jsonl",
                                                       f"test: {out / stem}.jsonl"))
    return out


def _ev(task_dir, *extra):
    from mens.config.compose import compose
    return compose([f"eval.tasks=[{MC},{GEN}]", f"eval.include_path={task_dir}", *extra]).eval


@pytest.fixture(scope="module")
def models(tiny_run):
    from omegaconf import OmegaConf

    from mens.compare.core import load_models

    (slots, base), (_, tuned) = load_models(tiny_run, OmegaConf.load(tiny_run / "spec.yaml"))
    yield slots, base, tuned
    slots.close()


@pytest.fixture(scope="module")
def results(models, task_dir):
    from mens.eval.harness import run_tasks

    slots, base, tuned = models
    ev, out = _ev(task_dir), {}
    for label, slot in (("base", base), ("tuned", tuned)):
        with slots.activate(slot):
            out[label] = run_tasks(slots.model, slots.tokenizer, ev, label=label, batch_size=8,
                                   max_length=512)
    return out


def test_run_tasks_numbers_per_doc_and_chat_choice(results, capsys):
    for label in ("base", "tuned"):
        res = results[label]
        assert res["label"] == label and res["lm_eval"].startswith("0.4.")
        assert json.loads(json.dumps(res)) == res           # JSON as is, doc ids included
        mc, gen = res["tasks"][MC], res["tasks"][GEN]
        assert (mc["n"], gen["n"]) == (20, 10)
        assert mc["version"] == gen["version"] == "1.0"
        assert (mc["output_type"], gen["output_type"]) == ("multiple_choice", "generate_until")
        # auto: the tiny tokenizer has a chat template → generation tasks only
        assert (mc["chat_template"], gen["chat_template"]) == (False, True)
        assert set(mc["metrics"]) == {"acc", "acc_norm"} and set(gen["metrics"]) == {"exact_match"}
        for task, n in ((mc, 20), (gen, 10)):
            for m in task["metrics"].values():
                assert m["higher_is_better"] is True and m["aggregation"] == "mean"
                docs = m["per_doc"]
                assert sorted(docs, key=int) == [str(i) for i in range(n)]
                assert set(docs.values()) <= {0.0, 1.0}
                # lm-eval's aggregate is the mean of its per-document values
                assert m["value"] == pytest.approx(sum(docs.values()) / n, abs=1e-12)
                assert m["stderr"] is not None
        assert len(mc["responses"]["none"]["0"]) == 4       # one log-likelihood per choice
        assert isinstance(gen["responses"]["none"]["0"][0], str)
    # the adapter is active for tuned: its log-likelihoods are not the base's
    b, t = (results[x]["tasks"][MC]["responses"]["none"] for x in ("base", "tuned"))
    assert any(abs(b[d][i][0] - t[d][i][0]) > 1e-3 for d in b for i in range(4))


def test_benchmark_rows_paired_by_doc(results, task_dir):
    from mens.eval.harness import CLOPPER, MCNEMAR, benchmark_rows

    ev = _ev(task_dir)
    rows = benchmark_rows(results["base"], results["tuned"], ev)
    assert [r["name"] for r in rows] == [f"{MC}/acc", f"{MC}/acc_norm", f"{GEN}/exact_match"]
    for r in rows:
        task = results["tuned"]["tasks"][r["task"]]
        # 0/1 scores (acc, exact_match): McNemar's exact test at 20 documents as at 10
        assert r["ci_method"] == MCNEMAR and r["gain"]["method"] == "exact"
        assert r["group"] == "benchmark" and r["version"] == "1.0"
        assert r["n"] == task["n"] and r["spoke"] is None and r["higher_is_better"] is True
        for side in ("base", "tuned"):
            lm_value = results[side]["tasks"][r["task"]]["metrics"][r["metric"]]["value"]
            assert r[side]["value"] == pytest.approx(lm_value, abs=1e-12)
            lo, hi = r[side]["ci"]
            assert lo <= r[side]["value"] <= hi
        assert r["delta"]["value"] == pytest.approx(r["tuned"]["value"] - r["base"]["value"])
        for k in ("value", "ci", "n"):                       # higher is better: same sign
            assert r["gain"][k] == r["delta"][k]
        assert r["delta"]["ci"][0] <= r["delta"]["value"] <= r["delta"]["ci"][1]
    # items aligned by doc_id: a reordered copy of the tuned per-doc values changes nothing
    shuffled = json.loads(json.dumps(results["tuned"]))
    for m in shuffled["tasks"][MC]["metrics"].values():
        m["per_doc"] = dict(reversed(list(m["per_doc"].items())))
    assert benchmark_rows(results["base"], shuffled, ev) == rows
    # one model alone: its own interval, no delta
    alone = benchmark_rows(None, results["tuned"], ev)
    assert all(r["ci_method"] == CLOPPER and "delta" not in r and "base" not in r for r in alone)


def test_aggregate_only_metric_keeps_lm_eval_stderr(results, task_dir):
    """A metric without per-document means (perplexity, corpus F1) is listed, not bootstrapped."""
    from mens.eval.harness import NO_CI, benchmark_rows

    base, tuned = (json.loads(json.dumps(results[x])) for x in ("base", "tuned"))
    for res in (base, tuned):
        m = res["tasks"][MC]["metrics"]["acc"]
        m["aggregation"], m["per_doc"] = "weighted_perplexity", None
    row = benchmark_rows(base, tuned, _ev(task_dir))[0]
    assert row["ci_method"] == NO_CI and row["base"]["ci"] is None
    assert row["base"]["stderr"] == results["base"]["tasks"][MC]["metrics"]["acc"]["stderr"]
    assert row["delta"]["value"] == pytest.approx(row["tuned"]["value"] - row["base"]["value"])


def test_chat_template_forced_off(models, task_dir, capsys):
    from mens.eval.harness import run_tasks

    slots, base, _ = models
    with slots.activate(base):
        res = run_tasks(slots.model, slots.tokenizer, _ev(task_dir, "eval.limit=2"),
                        label="base", batch_size=2, max_length=512, chat_template=False)
    assert res["tasks"][GEN]["chat_template"] is False and res["tasks"][GEN]["n"] == 2
    assert "mens_echo_gen: chat template not applied (eval.chat_template=false)" in \
        capsys.readouterr().out


@pytest.mark.slow   # builds lm-eval's index of ~15k bundled tasks (~20 s); test_run checks hellaswag offline
def test_unknown_task_names_near_matches():
    from mens.eval.tasks import load_tasks

    with pytest.raises(ConfigError) as e:
        load_tasks(["hellaswg"], None)
    assert e.value.key == "eval.tasks" and "`hellaswg`" in e.value.message
    assert "Near matches: hellaswag" in e.value.message


def test_relative_data_files_and_broken_task_are_config_errors(tmp_path, monkeypatch):
    from mens.eval.tasks import load_tasks

    monkeypatch.chdir(tmp_path)      # the shipped YAMLs name their JSONL relative to their dir
    with pytest.raises(ConfigError) as e:
        load_tasks([MC], str(TASKS))
    assert e.value.key == "eval.tasks" and "arith_mc.yaml" in e.value.message
    assert "write absolute paths" in e.value.message
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "b.yaml").write_text(f"task: mens_broken\ndataset_path: json\n"
                                   f"dataset_kwargs: {{data_files: {{test: {TASKS}/arith_mc.jsonl}}}}\n"
                                   f"output_type: multiple_choice\ntest_split: nosuchsplit\n"
                                   f"doc_to_text: q\ndoc_to_target: 0\ndoc_to_choice: [a]\n")
    with pytest.raises(ConfigError) as e:
        load_tasks(["mens_broken"], str(broken))
    assert "mens_broken" in e.value.message and str(broken / "b.yaml") in e.value.message


# --- acceptance: the numbers are lm-eval's own ---------------------------------------------------
def _merged(run: Path, out: Path) -> Path:
    """The tiny run merged by mens.export's own merge (fp32); it copies the base's tokenizer."""
    from omegaconf import OmegaConf

    from mens.export.merge import MergedWeights, SafetensorsDir, load_adapter, write_hf_dir
    from mens.model.load import weights_dir

    base = weights_dir(OmegaConf.load(run / "spec.yaml").rung)
    src = MergedWeights(SafetensorsDir(base), load_adapter(run / "adapter"), "fp32")
    merged = write_hf_dir(src, base, out / "merged", [])
    assert (merged / "tokenizer.json").is_file() and (merged / "tokenizer_config.json").is_file()
    return merged


def _cli(merged: Path, task: str, task_dir: Path, out: Path, chat: bool) -> tuple[dict, dict]:
    """`lm-eval run` as a user would type it: (results[task], {doc_id: sample})."""
    cmd = [sys.executable, "-m", "lm_eval", "run", "--model", "hf", "--model_args",
           f"pretrained={merged},dtype=float32,max_length=512", "--tasks", task,
           "--include_path", str(task_dir), "--batch_size", "8", "--device", "cpu",
           "--seed", "0", "--output_path", str(out), "--log_samples"]
    cmd += ["--apply_chat_template"] if chat else []
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(next(out.rglob("results_*.json")).read_text())
    samples = [json.loads(x) for x in next(out.rglob(f"samples_{task}_*.jsonl")).read_text()
               .splitlines()]
    return res["results"][task], {str(s["doc_id"]): s for s in samples}


@pytest.mark.slow   # two `lm-eval run` processes, each indexing lm-eval's bundled tasks
def test_tuned_numbers_equal_lm_eval_cli_on_merged_model(tiny_run, results, task_dir, tmp_path,
                                                        mens_cli):
    import shutil

    merged = _merged(tiny_run, tmp_path)
    tuned = results["tuned"]["tasks"]
    # `mens eval` as users type it, on a copy of the run: its eval.json rows
    run = shutil.copytree(tiny_run, tmp_path / "run")
    p = mens_cli("mens.eval", f"run={run}", f"eval.include_path={task_dir}",
                 f"eval.tasks=[{MC},{GEN}]", "eval.in_domain=false", "eval.collateral=false",
                 "eval.batch_size=8", "eval.max_length=512", "logger=csv",
                 env={"HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads((run / "eval.json").read_text())["rows"]}
    for task, chat in ((MC, False), (GEN, True)):
        assert tuned[task]["chat_template"] is chat
        cli, samples = _cli(merged, task, task_dir, tmp_path / task, chat)
        for key, m in tuned[task]["metrics"].items():
            row = rows[f"{task}/{key}"]
            assert row["tuned"]["value"] == cli[f"{key},none"], (task, key)   # the CLI's own
            lo, hi = row["tuned"]["ci"]
            assert lo <= row["tuned"]["value"] <= hi and row["n"] == len(samples)
            assert row["base"]["ci"] and row["gain"]["ci"]                  # both, paired
        for key, m in tuned[task]["metrics"].items():
            assert m["value"] == cli[f"{key},none"], (task, key)          # exact, as lm-eval's
            assert m["stderr"] == pytest.approx(cli[f"{key}_stderr,none"], abs=1e-9)
            assert m["per_doc"] == {d: float(s[key]) for d, s in samples.items()}
        ours = tuned[task]["responses"]["none"]
        for d, s in samples.items():
            if chat:    # the same greedy text from the unmerged adapter and the merged weights
                assert ours[d] == s["filtered_resps"], d
            else:       # log-likelihoods of every choice, within float noise of the merge
                for (a, _), (b, _) in zip(ours[d], s["filtered_resps"]):
                    assert a == pytest.approx(float(b), abs=1e-4), d


# --- groups and directions (issue #37) ------------------------------------------------------------
GROUP, MACRO = "mens_arith_group", "mens_arith_macro"


@pytest.fixture(scope="module")
def group_dir(tmp_path_factory) -> Path:
    """Two lm-eval groups over arith_mc's documents split 12 + 8 (sizes differ, so weighting
    matters): GROUP weights subtasks by size (as mmlu), MACRO does not (weight_by_size: false)."""
    out = tmp_path_factory.mktemp("lm_eval_groups")
    docs = (TASKS / "arith_mc.jsonl").read_text().splitlines()
    text = (TASKS / "arith_mc.yaml").read_text()
    for group, by_size in ((GROUP, "true"), (MACRO, "false")):
        subs = [f"{group}_lo", f"{group}_hi"]
        for name, part in zip(subs, (docs[:12], docs[12:])):
            (out / f"{name}.jsonl").write_text("\n".join(part) + "\n")
            (out / f"{name}.yaml").write_text(text.replace(f"task: {MC}", f"task: {name}")
                                              .replace("test: arith_mc.jsonl",
                                                       f"test: {out / name}.jsonl"))
        (out / f"{group}.yaml").write_text(
            f"group: {group}\ntask: [{', '.join(subs)}]\naggregate_metric_list:\n"
            f"  - metric: acc\n    weight_by_size: {by_size}\nmetadata:\n  version: 2.0\n")
    return out


@pytest.fixture(scope="module")
def group_results(models, group_dir):
    from mens.config.compose import compose
    from mens.eval.harness import run_tasks

    slots, base, tuned = models
    ev = compose([f"eval.tasks=[{GROUP},{MACRO}]", f"eval.include_path={group_dir}"]).eval
    out = {}
    for label, slot in (("base", base), ("tuned", tuned)):
        with slots.activate(slot):
            out[label] = run_tasks(slots.model, slots.tokenizer, ev, label=label, batch_size=8,
                                   max_length=512)
    return ev, out


def test_a_group_is_resampled_over_its_subtasks_documents(group_results):
    """A group row (mmlu, bbh) has an interval: paired over its subtasks' documents, its value
    lm-eval's own aggregate — by size, or each subtask once (weight_by_size: false)."""
    from mens.eval.harness import MCNEMAR, PAIRED, benchmark_rows

    ev, res = group_results
    rows = {r["name"]: r for r in benchmark_rows(res["base"], res["tuned"], ev)}
    for group in (GROUP, MACRO):
        info = res["base"]["groups"][group]
        assert info["subtasks"] == [f"{group}_lo", f"{group}_hi"]
        assert info["weight_by_size"] == {"acc": group == GROUP}
        r = rows[f"{group}/acc"]
        # by size: each document's 0/1 once (McNemar's); the macro mean weighs them (bootstrap)
        assert r["n"] == 20 and r["version"] == "2.0"
        assert r["ci_method"] == (MCNEMAR if group == GROUP else PAIRED)
        for side in ("base", "tuned"):
            lm = res[side]["groups"][group]["metrics"]["acc"]["value"]
            assert r[side]["value"] == pytest.approx(lm, abs=1e-12), (group, side)
            lo, hi = r[side]["ci"]
            assert lo <= r[side]["value"] <= hi
        lo, hi = r["gain"]["ci"]
        assert lo <= r["gain"]["value"] <= hi and r["gain"]["n"] == 20
    # the macro mean differs from the size-weighted one where the subtasks' rates differ
    subs = [res["base"]["tasks"][f"{MACRO}_{x}"]["metrics"]["acc"]["value"] for x in ("lo", "hi")]
    assert rows[f"{MACRO}/acc"]["base"]["value"] == pytest.approx(sum(subs) / 2)
    # a subtask without per-document means: the group has no interval (the gate cannot judge)
    broken = json.loads(json.dumps(res["tuned"]))
    broken["tasks"][f"{GROUP}_lo"]["metrics"]["acc"]["per_doc"] = None
    row = next(r for r in benchmark_rows(res["base"], broken, ev) if r["name"] == f"{GROUP}/acc")
    assert row["gain"]["ci"] is None and row["gain"]["method"] is None


def test_a_metric_without_a_direction_is_an_error_naming_it(tmp_path, task_dir):
    """higher_is_better missing for a metric lm-eval's registry does not know: a ConfigError
    before any weights load (not silently higher-is-better); benchmark_rows refuses one too."""
    from mens.eval.harness import benchmark_rows, check_directions
    from mens.eval.tasks import load_tasks

    (tmp_path / "utils.py").write_text(
        "def score(doc, results):\n    return {'closeness': 1.0}\n")
    (tmp_path / "nodir.yaml").write_text(
        f"task: mens_no_direction\ndataset_path: json\n"
        f"dataset_kwargs: {{data_files: {{test: {task_dir / 'arith_mc.jsonl'}}}}}\n"
        f"test_split: test\noutput_type: multiple_choice\n"
        f"doc_to_text: \"{{{{question}}}}\"\ndoc_to_choice: \"{{{{choices}}}}\"\n"
        f"doc_to_target: answer\nprocess_results: !function utils.score\n"
        f"metric_list:\n  - metric: closeness\n    aggregation: mean\n")
    _, loaded = load_tasks(["mens_no_direction"], str(tmp_path))
    with pytest.raises(ConfigError) as e:
        check_directions(loaded)
    assert e.value.key == "eval.tasks"
    assert "metric `closeness` of lm-eval task `mens_no_direction` has no direction" in \
        e.value.message and "higher_is_better: true" in e.value.message
    run = {"tasks": {"t": {"n": 2, "version": "1", "metrics": {"m": {
        "metric": "m", "filter": "none", "value": 0.5, "higher_is_better": None,
        "aggregation": "mean", "per_doc": {"0": 0.0, "1": 1.0}}}}}, "groups": {}}
    with pytest.raises(ConfigError, match="metric `m` of lm-eval task `t` has no direction"):
        benchmark_rows(run, run, _ev(task_dir))
