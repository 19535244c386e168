"""A user's own data (`data=file` / `data=hf`): every format read from files the tests write,
the held-out split, duplicates and decontamination (remove and count), the data lock, `mens
data inspect`, and every kind of bad input → exit 2 naming the file:line and the field.
All in-process and before any model loads: the bad cases fail in compile_run."""
from __future__ import annotations

import json

import pytest
from userdata import (alpaca_records, chat_records, preference_records, sharegpt_records,
                      write_csv, write_json, write_jsonl, write_parquet)

from mens.data.clean import hash_fraction, record_id
from mens.data.sources import load_data

BASE = {"source": "file", "eval_fraction": 0.1, "decontam_n": 13, "decontam_threshold": 0.5}


def data(path, **kw) -> dict:
    return {**BASE, "path": str(path), **kw}


def test_every_format_reads_into_mens_records(tmp_path):
    chat = load_data(data(write_jsonl(tmp_path / "c.jsonl", chat_records(60))), "sft")
    assert chat.format == "messages" and chat.kind == "sft"
    assert [m["role"] for m in chat.train[0]["messages"]][:3] == ["system", "user", "assistant"]
    alp = load_data(data(write_json(tmp_path / "a.json", alpaca_records(60))), "sft")
    assert alp.format == "alpaca"
    assert alp.train[0]["messages"][0]["content"].startswith("Repeat the word")
    sg = load_data(data(write_parquet(tmp_path / "s.parquet", sharegpt_records(60))), "sft")
    assert sg.format == "sharegpt"
    assert [m["role"] for m in sg.train[0]["messages"]] == ["user", "assistant"]
    pc = [{"prompt": f"Say {i}", "completion": f"{i}!"} for i in range(40)]
    csv_ = load_data(data(write_csv(tmp_path / "p.csv", pc)), "sft")
    assert csv_.format == "prompt_completion" and csv_.train[0]["where"].startswith(
        str(tmp_path / "p.csv") + ":")
    text = load_data(data(write_jsonl(tmp_path / "t.jsonl",
                                      [{"text": f"vox line {i} " * 5} for i in range(40)])), "sft")
    assert text.kind == "text" and "text" in text.train[0]
    pairs = load_data(data(write_jsonl(tmp_path / "d.jsonl", preference_records(40))), "dpo")
    assert pairs.kind == "preference"
    r = pairs.train[0]
    assert [m["role"] for m in r["prompt"]] == ["user"] and r["chosen"][0]["role"] == "assistant"


def test_chat_form_pairs_columns_and_system_prompt(tmp_path):
    recs = [{"chosen": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "good"}],
             "rejected": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "bad"}]}
            for i in range(30)]
    ds = load_data(data(write_jsonl(tmp_path / "d.jsonl", recs)), "dpo")
    assert ds.train[0]["prompt"][0]["content"].startswith("q") and ds.train[0]["chosen"][0]["content"] == "good"
    qa = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(30)]
    ds = load_data(data(write_jsonl(tmp_path / "qa.jsonl", qa),
                        columns={"prompt": "question", "completion": "answer"},
                        system_prompt="Be brief."), "sft")
    assert ds.format == "prompt_completion"
    assert ds.train[0]["messages"][0] == {"role": "system", "content": "Be brief."}


def test_eval_split_by_hash_is_stable_when_the_file_grows(tmp_path):
    small = load_data(data(write_jsonl(tmp_path / "a.jsonl", chat_records(200))), "sft")
    big = load_data(data(write_jsonl(tmp_path / "b.jsonl", chat_records(400))), "sft")
    held_small = {r["id"] for r in small.eval}
    held_big = {r["id"] for r in big.eval}
    first = {r["id"] for r in small.train} | held_small
    assert held_small and held_small == held_big & first     # nobody changed sides
    assert all(hash_fraction(i) < 0.1 for i in held_big)
    assert not {r["id"] for r in big.train} & held_big


def test_duplicates_and_contamination_are_removed_and_counted(tmp_path):
    recs = chat_records(120, multi_turn=False)
    long_q = "Please add these numbers for me carefully and show only the final sentence: "
    # an eval record (its hash falls in the held-out 10 %) and its near-copy in train (one
    # word of the answer changed; its hash falls in train): contamination
    for k in range(1000):
        victim = [{"role": "user", "content": f"{long_q}What is {k} plus {k + 1}?"},
                  {"role": "assistant", "content": f"{k} plus {k + 1} is {2 * k + 1}."}]
        near = [victim[0], {"role": "assistant", "content": f"{k} plus {k + 1} equals {2 * k + 1}."}]
        vid, nid = record_id({"messages": victim}), record_id({"messages": near})
        if hash_fraction(vid) < 0.1 <= hash_fraction(nid):
            break
    recs += [{"messages": victim}, {"messages": near}, recs[0], recs[1]]   # + 2 exact repeats
    ds = load_data(data(write_jsonl(tmp_path / "b.jsonl", recs)), "sft")
    assert ds.stats["duplicates_removed"] == 2
    assert ds.stats["contaminated_eval_removed"] == 1
    assert ds.stats["contaminated_examples"] == [f"{tmp_path / 'b.jsonl'}:121"]
    assert vid not in {r["id"] for r in ds.eval} and nid in {r["id"] for r in ds.train}
    off = load_data(data(tmp_path / "b.jsonl", decontam_n=0), "sft")
    assert off.stats["contaminated_eval_removed"] == 0 and vid in {r["id"] for r in off.eval}


def test_decontamination_removes_an_eval_record_whose_ngrams_are_in_train():
    from mens.data.clean import decontaminate
    from mens.data.formats import words

    text = "the quick brown fox jumps over the lazy dog near the quiet river bank today"
    train = [{"text": text + " and more"}]
    held = [{"text": text}, {"text": "an entirely different sentence about nothing in particular "
                                     "with enough words to make several thirteen grams here"}]
    clean, dirty = decontaminate(held, train, 13, 0.5, words)
    assert dirty == [held[0]] and clean == [held[1]]


def test_filters_golden_tag_and_eval_path(tmp_path):
    recs = chat_records(50, multi_turn=False)
    for i, r in enumerate(recs):
        r.update(rating=1 + i % 5, tags=["math"] + (["eval_golden"] if i % 10 == 2 else []))
    path = write_jsonl(tmp_path / "r.jsonl", recs)
    ds = load_data(data(path, min_rating=3), "sft")
    assert ds.stats["below_min_rating"] == 20
    assert ds.stats["eval_from"] == "tag eval_golden"
    assert all(r["golden"] for r in ds.eval) and not any(r["golden"] for r in ds.train)
    held = write_jsonl(tmp_path / "held.jsonl", chat_records(10, seed=9))
    ds = load_data(data(path, eval_path=str(held)), "sft")
    assert ds.stats["eval_from"] == "eval_path" and len(ds.eval) == 10
    assert [x.get("role") for x in ds.lock] == [None, "eval"]


def test_the_lock_names_each_file_by_sha256(tmp_path, compile_run):
    path = write_jsonl(tmp_path / "c.jsonl", chat_records(40))
    spec, _ = compile_run("+hw=cpu", "data=file", f"data.path={path}")
    import hashlib
    assert spec.data_lock[0]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert spec.data.format == "messages"
    from mens.data.select import lock_changes
    write_jsonl(path, chat_records(41))
    spec2, _ = compile_run("+hw=cpu", "data=file", f"data.path={path}")
    assert any("changed: sha256" in x for x in lock_changes(spec.data_lock, spec2.data_lock))


# --- bad data: one paragraph, exit 2, the file:line and the field, nothing that looks finished --
def _bad_files(tmp):
    chat = chat_records(3, multi_turn=False)
    write_jsonl(tmp / "mixed.jsonl", [chat[0], alpaca_records(1)[0]])
    (tmp / "utf.jsonl").write_bytes(json.dumps(chat[0]).encode() + b"\n" + b'{"text": "caf\xe9"}\n')
    write_jsonl(tmp / "nofield.jsonl", [chat[0], {"messages": [{"role": "user"}]}])
    write_jsonl(tmp / "unknown.jsonl", [{"question": "q", "answer": "a"}])
    write_jsonl(tmp / "alt.jsonl", [chat[0], {"messages": [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"}]}])
    write_jsonl(tmp / "pairs.jsonl", preference_records(20))
    write_jsonl(tmp / "sft.jsonl", chat_records(20))
    rated = [dict(r, rating=1) for r in chat_records(20)]
    write_jsonl(tmp / "rated.jsonl", rated)
    (tmp / "notes.txt").write_text("hello")


BAD = [   # (overrides, words the message must hold)
    (["data.path=missing.jsonl"], ["missing.jsonl", "no such file", "data.path"]),
    (["data.path=unknown.jsonl"], ["unknown.jsonl:1", "no known format", "data.columns"]),
    (["data.path=nofield.jsonl"], ["nofield.jsonl:2", "messages[0]", "content"]),
    (["data.path=pairs.jsonl"], ["pairs.jsonl", "preference", "lane.objective=dpo"]),
    (["data.path=sft.jsonl", "lane=dpo"], ["sft.jsonl", "preference pairs", "lane.objective=sft"]),
    (["data.path=rated.jsonl", "data.min_rating=3"], ["min_rating filter", "data.min_rating"]),
    (["data.path=mixed.jsonl"], ["mixed.jsonl:2", "mixed formats", "alpaca", "mixed.jsonl:1"]),
    (["data.path=utf.jsonl"], ["utf.jsonl:2", "invalid UTF-8"]),
    (["data.path=alt.jsonl"], ["alt.jsonl:2", "roles do not alternate", "messages[1]"]),
    (["data.path=notes.txt"], ["notes.txt", "unsupported file type"]),
    (["data.format=alpaca", "data.path=sft.jsonl"], ["sft.jsonl:1", "instruction", "alpaca"]),
]


@pytest.mark.parametrize("overrides, words", BAD, ids=[o[0].split("=")[1] + (
    "+" + o[1] if len(o) > 1 else "") for o, _ in BAD])
def test_bad_data_exits_2_naming_file_line_and_field(tmp_path, monkeypatch, capsys,
                                                      overrides, words):
    from mens.cli.train import main

    _bad_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    code = main(["+hw=cpu", "data=file", *overrides])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("mens: error (exit 2): ") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, (w, err)
    assert not list(tmp_path.rglob("summary.json")) and not list(tmp_path.rglob("adapter"))


def test_a_hugging_face_dataset_through_datasets(tmp_path, monkeypatch):
    """data=hf reads through `datasets.load_dataset` — here a local dataset directory (the same
    call a hub name takes, without a network): splits by name, a fingerprint in the lock."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "ds"
    d.mkdir()
    write_jsonl(d / "train.jsonl", chat_records(50))
    write_jsonl(d / "test.jsonl", chat_records(10, seed=5))
    ds = load_data({"source": "hf", "name": str(d), "split": "train", "eval_path": "test"}, "sft")
    assert (len(ds.train), len(ds.eval), ds.format) == (50, 10, "messages")
    assert [(x["split"], bool(x["fingerprint"])) for x in ds.lock] == [("train", True),
                                                                        ("test", True)]
    assert ds.train[0]["where"] == f"{d}[train] row 1"


def test_a_dataset_name_that_is_not_there_offline_exits_2(tmp_path, monkeypatch, capsys):
    from mens.cli.train import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert main(["+hw=cpu", "data=hf", "data.name=nobody/no-such-dataset"]) == 2
    err = capsys.readouterr().err
    assert "nobody/no-such-dataset" in err and "offline" in err and "Traceback" not in err


def test_inspect_prints_the_report(tmp_path, monkeypatch, capsys):
    from mens.cli.data import main

    write_jsonl(tmp_path / "c.jsonl", chat_records(300) + chat_records(3))   # 3 exact repeats
    monkeypatch.chdir(tmp_path)
    assert main(["inspect", "data=file", "data.path=c.jsonl", "train.seq_len=64"]) == 0
    out = capsys.readouterr().out
    for w in ("format messages (sft)", "303 read", "duplicates_removed 3", "p50", "p99",
              "at seq_len 64:", "⟦", "<|im_end|>⟧", "█"):
        assert w in out, (w, out)
    assert main(["inspect", "data=file", "data.path=nothing.jsonl"]) == 2
    assert main(["check"]) == 2
