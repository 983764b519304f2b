"""Other harnesses' outputs scored as submissions (evaluator/interop.py), written here in their
documented layouts: lmms-eval `--log_samples` (JSON lines of samples with `doc`, `filtered_resps`;
the older JSON object with `logs`) and VLMEvalKit prediction tables (the dataset's columns plus
`prediction`, as .tsv and .xlsx). The golden: the same predictions as a vlbench submission give the
same metrics; rows outside the split are counted; bad files are one line, exit 2."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest


@pytest.fixture(scope="module")
def gqa(built):
    return built("gqa-ood")


@pytest.fixture(scope="module")
def gqa_rows(gqa):
    table = pq.read_table(gqa / "all" / "testdev-00000-of-00001.parquet", columns=["question_id", "answer"])
    rows = table.to_pylist()
    # every third answer wrong; two questions of GQA test-dev that GQA-OOD does not keep
    return [(r["question_id"], r["answer"] if k % 3 else "nothing") for k, r in enumerate(rows)]


def _vlbench(path, rows):
    path.write_text(json.dumps([{"questionId": q, "prediction": a} for q, a in rows]))
    return path


def _lmms_sample(n, doc, answer):
    return {"doc_id": n, "doc": doc, "target": "x", "arguments": [], "resps": [[answer]], "filtered_resps": [answer],
            "doc_hash": "h", "prompt_hash": "h", "target_hash": "h", "exact_match": 0.0}


def _score(cli, tmp_path, data, path, *extra, bench="gqa-ood"):
    report = tmp_path / f"r-{path.name}"
    code, _, err = cli("evaluate", bench, "--data", data, "--predictions", path, "--report", report, "--bootstrap",
                       "0", *extra)
    assert code == 0, err
    return json.loads((report / "metrics.json").read_text())


@pytest.mark.slow  # five evaluations and a comparison end to end
def test_lmms_eval_gqa_logs_score_as_the_same_submission(gqa, gqa_rows, cli, tmp_path):
    golden = _score(cli, tmp_path, gqa, _vlbench(tmp_path / "golden.json", gqa_rows))
    samples = [_lmms_sample(n, {"id": q, "imageId": "n1", "question": "?", "answer": "a"}, a)
               for n, (q, a) in enumerate(gqa_rows)]
    samples += [_lmms_sample(len(samples), {"id": "999999991", "question": "?"}, "yes"),
                _lmms_sample(len(samples) + 1, {"id": "999999992", "question": "?"}, "no")]
    jsonl = tmp_path / "samples_gqa_2026-11-23.jsonl"
    jsonl.write_text("".join(json.dumps(s) + "\n" for s in samples))
    got = _score(cli, tmp_path, gqa, jsonl)
    for key in ("acc_all", "acc_head", "acc_tail", "delta_tail_head"):
        assert got[key] == golden[key], key
    assert got["input"] == {"format": "lmms-eval", "rows": len(samples), "in_split": len(gqa_rows),
                            "outside_split": 2, "first_outside": "999999991", "unfinished_answers": 0,
                            "answers": "thinking removed (<think>...</think>, \u25c1think\u25b7...\u25c1/think\u25b7, "
                                       "<thinking>...</thinking>, <reasoning>...</reasoning>, <thought>...</thought>); "
                                       "first line of the output, trimmed, one trailing period removed; lower case"}
    old = tmp_path / "gqa.json"  # the older layout: one JSON object with the task's config and `logs`
    old.write_text(json.dumps({"args": {}, "model_configs": {"task": "gqa"}, "logs": samples}))
    assert _score(cli, tmp_path, gqa, old)["acc_all"] == golden["acc_all"]
    old.write_text(json.dumps({"args": {}, "model_configs": {"task": "mme"}, "logs": samples}))
    code, _, err = cli("evaluate", "gqa-ood", "--data", gqa, "--predictions", old)
    assert code == 2 and "lmms-eval task 'mme'" in err and len(err.strip().splitlines()) == 1
    code, stdout, err = cli("compare", "gqa-ood", "--data", gqa, "--predictions", tmp_path / "golden.json",
                            "--predictions", jsonl, "--bootstrap", "50")
    assert code == 0, err
    assert "acc_all: +0.00 [+0.00, +0.00] p=1.0" in stdout  # the same predictions: no difference


@pytest.mark.slow  # four evaluations end to end
def test_vlmevalkit_tables_score_as_the_same_submission(gqa, gqa_rows, cli, tmp_path):
    import openpyxl
    golden = _score(cli, tmp_path, gqa, _vlbench(tmp_path / "golden.json", gqa_rows))
    header = ["index", "question", "answer", "question_id", "prediction"]
    tsv = tmp_path / "Qwen2-VL-2B_GQA_TestDev_Balanced.tsv"
    tsv.write_text("\t".join(header) + "\n" + "".join(f"{k}\tq?\ta\t{q}\t{a}\n" for k, (q, a) in enumerate(gqa_rows)))
    got = _score(cli, tmp_path, gqa, tsv)
    assert got["acc_all"] == golden["acc_all"]
    assert got["input"]["format"] == "vlmevalkit" and got["input"]["dataset"] == "GQA_TestDev_Balanced"
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(header)
    for k, (q, a) in enumerate(gqa_rows):
        # a spreadsheet keeps numeric ids as numbers (an id with a leading zero stays text)
        sheet.append([k, "q?", "a", q if q.startswith("0") else int(q), a])
    xlsx = tmp_path / "model_GQA_TestDev_Balanced.xlsx"
    book.save(xlsx)
    assert _score(cli, tmp_path, gqa, xlsx)["acc_all"] == golden["acc_all"]
    no_id = tmp_path / "no_id.tsv"
    no_id.write_text("index\tquestion\tprediction\n0\tq?\tyes\n")
    code, _, err = cli("evaluate", "gqa-ood", "--data", gqa, "--predictions", no_id)
    assert code == 2 and "`index` is its own row number" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # a build and two evaluations end to end
def test_lmms_eval_vqav2_val_logs(built, cli, tmp_path):
    data = built("vqa-v2")
    table = pq.read_table(data / "default" / "validation-00000-of-00001.parquet",
                          columns=["question_id", "multiple_choice_answer"]).to_pylist()
    rows = [(r["question_id"], r["multiple_choice_answer"] if k % 2 else "blue") for k, r in enumerate(table)]
    golden = tmp_path / "golden.json"
    golden.write_text(json.dumps([{"question_id": q, "answer": a} for q, a in rows]))
    jsonl = tmp_path / "samples_vqav2_val.jsonl"
    jsonl.write_text("".join(json.dumps(_lmms_sample(n, {"question_id": q, "question": "?"}, a)) + "\n"
                             for n, (q, a) in enumerate(rows)))
    assert _score(cli, tmp_path, data, jsonl, bench="vqa-v2")["accuracy"] == \
        _score(cli, tmp_path, data, golden, bench="vqa-v2")["accuracy"]


def test_bad_harness_input_is_one_line(gqa, cli, tmp_path, built):
    broken = tmp_path / "samples_gqa.jsonl"
    broken.write_text('{"doc_id": 0, "doc": {"question": "?"}, "filtered_resps": ["yes"]}\n{not json\n')
    code, _, err = cli("evaluate", "gqa-ood", "--data", gqa, "--predictions", broken)
    assert code == 2 and "line 2" in err and len(err.strip().splitlines()) == 1
    broken.write_text('{"doc_id": 0, "doc": {"question": "?"}, "filtered_resps": ["yes"]}\n')
    code, _, err = cli("evaluate", "gqa-ood", "--data", gqa, "--predictions", broken)
    assert code == 2 and "sample 0 (doc_id 0) has no doc field id" in err
    socialiq = built("socialiq")
    code, _, err = cli("evaluate", "socialiq", "--data", socialiq, "--predictions", broken, "--format", "lmms-eval")
    assert code == 2 and "socialiq has no lmms-eval counterpart" in err
    # the benchmarks named are those whose Task declares an lmms-eval task (gqa_ood/task.py, vqa/task.py)
    assert "(these do: gqa-ood, vqa-v2, vqa-cp;" in err


def test_a_reasoning_models_log_scores_as_its_answers(gqa, gqa_rows, cli, tmp_path):
    """A log of a thinking model (lmms-eval's filtered responses keep the thinking unless its --reasoning_tags
    strip it): the thinking is removed before the answer is read, so it scores as its answers; an answer cut
    off inside its thinking is empty (wrong) and counted; other markers are given with --reasoning-tags."""
    golden = _score(cli, tmp_path, gqa, _vlbench(tmp_path / "golden.json", gqa_rows))
    doc = {"imageId": "n1", "question": "?", "answer": "a"}
    thinking = [_lmms_sample(n, {**doc, "id": q}, f"<think>\nI look at it.\n</think>\n\n{a}")
                for n, (q, a) in enumerate(gqa_rows)]
    path = tmp_path / "samples_gqa_thinking.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in thinking))
    got = _score(cli, tmp_path, gqa, path)
    assert got["acc_all"] == golden["acc_all"] and got["input"]["unfinished_answers"] == 0
    cut = [{**s, "filtered_resps": ["<think>\nI look at"]} if n == 0 else s for n, s in enumerate(thinking)]
    path.write_text("".join(json.dumps(s) + "\n" for s in cut))
    expected = _score(cli, tmp_path, gqa, _vlbench(tmp_path / "cut.json", [(gqa_rows[0][0], ""), *gqa_rows[1:]]))
    got = _score(cli, tmp_path, gqa, path)
    assert got["input"]["unfinished_answers"] == 1 and got["acc_all"] == expected["acc_all"]
    plan = [_lmms_sample(n, {**doc, "id": q}, f"[plan]I look.[/plan]{a}") for n, (q, a) in enumerate(gqa_rows)]
    path.write_text("".join(json.dumps(s) + "\n" for s in plan))
    assert _score(cli, tmp_path, gqa, path, "--reasoning-tags", "[plan],[/plan]")["acc_all"] == golden["acc_all"]


def test_an_eval_log_of_many_large_members_is_refused_past_the_total(monkeypatch, tmp_path):
    """An Inspect `.eval` log is a zip: 6 deflated members of 256 MB each at the member limit made a 1.49 MB upload
    take a scoring worker to 2.16 GB. The members read are bounded in all (here both limits made small: 4 members of
    1 MiB of JSON whitespace against a 3 MiB total; 3 of them pass)."""
    import zipfile

    from core.errors import SubmissionError
    from evaluator.harness import logs

    monkeypatch.setattr(logs, "MEMBER_LIMIT", 1 << 20)
    monkeypatch.setattr(logs, "TOTAL_LIMIT", 3 << 20)
    path = tmp_path / "bomb.eval"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for k in range(4):
            archive.writestr(f"samples/{k}.json", b"{}" + b" " * ((1 << 20) - 2))
    assert path.stat().st_size < 50_000
    with pytest.raises(SubmissionError, match=r"samples/3.json is 1,048,576 bytes .*the members read 3 MiB in all"):
        logs.eval_members(path, "samples/")
    assert len(logs.eval_members(path, "samples/0")) == 1
