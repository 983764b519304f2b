"""Language-shortcut labels (the VCR-Visor paper, App. A, Table 6): the agreement rule on planted model
outputs, deterministic word shuffles, reproducible training, the new folder version, `evaluate --by`,
and bad input. Text-only models are tiny random BERT / RoBERTa encoders built offline."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import assert_one_error_line

from evaluator.shortcuts.labels import (
    ChoiceQuestions,
    ShortcutOptions,
    TokenCache,
    agreement_labels,
    label_shares,
    shuffle_words,
    train_and_score,
    word_level,
)
from pipelines.build import run_build
from pipelines.tiny_models import write_tiny_text_encoder


def test_labels_follow_the_agreement_rule_on_planted_outputs():
    """Six runs (2 models x 3 seeds) over five examples: all right -> Biased, none -> Non-Biased,
    anything between -> Neutral (Appendix A)."""
    correct = np.array([[1, 0, 1, 0, 1],
                        [1, 0, 1, 0, 0],
                        [1, 0, 0, 0, 1],
                        [1, 0, 1, 0, 1],
                        [1, 0, 1, 1, 1],
                        [1, 0, 1, 0, 1]], dtype=bool)
    assert agreement_labels(correct) == ["Biased", "Non-Biased", "Neutral", "Neutral", "Neutral"]
    assert label_shares(agreement_labels(correct)) == {"Biased": 20.0, "Neutral": 60.0, "Non-Biased": 20.0}


def test_a_row_decided_by_several_examples_needs_every_run_right_on_all_of_them():
    """Social-IQ's rows (answers) take their question's label, decided by its A4 examples: Biased
    only when every run is right on every example, Non-Biased only when no run is right on any.
    Planted outputs of three runs on four examples; rows 0-1 share examples 0-1, row 2 has 2-3."""
    from evaluator.shortcuts.labels import runs_right

    correct = np.array([[1, 1, 0, 0],
                        [1, 1, 0, 1],
                        [1, 1, 0, 0]], dtype=bool)
    rows = ((0, 1), (0, 1), (2, 3), (2,))
    assert agreement_labels(correct, rows) == ["Biased", "Biased", "Neutral", "Non-Biased"]
    assert runs_right(correct, rows) == [6, 6, 1, 0]


def test_word_shuffles_are_seeded_per_example_and_keep_tags_whole():
    text = "Why is [person1] looking at [person2] so angrily ?"
    assert shuffle_words(text, random.Random("0/0")) == shuffle_words(text, random.Random("0/0"))
    shuffled = shuffle_words(text, random.Random("0/0"))
    assert sorted(shuffled.split()) == sorted(text.split()) and shuffled != text
    questions = ChoiceQuestions(["a b c d e", "f g h i j"], [["k l m", "n o p"], ["q r s", "t u v"]], [0, 1])
    once, again = word_level(questions, 3), word_level(questions, 3)
    assert once == again and word_level(questions, 4) != once
    # example k draws from Random(f"{seed}/{k}"): its context first, then its candidates in order
    rng = random.Random("3/1")
    assert once.contexts[1] == shuffle_words("f g h i j", rng)
    assert once.candidates[1] == [shuffle_words("q r s", rng), shuffle_words("t u v", rng)]
    assert once.labels == [0, 1]


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    root = tmp_path_factory.mktemp("encoders")
    return {family: write_tiny_text_encoder(root / family, family) for family in ("bert", "roberta")}


@pytest.fixture(scope="module")
def vcr_built(sample_sources, tmp_path_factory):
    out = tmp_path_factory.mktemp("vcr-shortcuts") / "vcr"
    run_build("vcr", sample_sources, out)
    return out


@pytest.mark.slow
def test_training_is_reproducible_for_a_fixed_seed(encoders, vcr_built):
    from core.data import load_table
    from evaluator.vcr.task import VCRTask

    train = VCRTask().choice_questions(load_table(vcr_built, "default", "train"))["q_a"]
    test = VCRTask().choice_questions(load_table(vcr_built, "default", "val"))["q_a"]
    options = ShortcutOptions(models=(str(encoders["bert"]),), seeds=(0,), epochs=1)
    first, seconds = train_and_score(str(encoders["bert"]), 0, train, test, options, TokenCache())
    again, _ = train_and_score(str(encoders["bert"]), 0, train, test, options, TokenCache())
    other, _ = train_and_score(str(encoders["bert"]), 1, train, test, options, TokenCache())
    assert first.tolist() == again.tolist() and first.tolist() != other.tolist()
    assert set(seconds) == {"tokenize", "data", "train", "score"}


@pytest.fixture(scope="module")
def vcr_labelled(encoders, vcr_built, tmp_path_factory):
    from evaluator.shortcuts.run import run_shortcuts

    out = tmp_path_factory.mktemp("vcr-labelled") / "vcr-labelled"
    run_shortcuts("vcr", str(vcr_built), out, options=ShortcutOptions(
        models=(str(encoders["bert"]), str(encoders["roberta"])), seeds=(0,), epochs=1))
    return out


@pytest.mark.slow
def test_vcr_labels_become_a_new_folder_version_and_decompose_a_submission(vcr_built, vcr_labelled, cli, tmp_path):
    out = vcr_labelled
    labels = pq.read_table(out / "shortcuts" / "val-00000-of-00001.parquet").to_pylist()
    val = pq.read_table(vcr_built / "default" / "val-00000-of-00001.parquet")
    assert [r["annot_id"] for r in labels] == val.column("annot_id").to_pylist()
    for row in labels:  # 2 models x 1 seed: the label is the agreement of the two runs
        for level in ("word", "sentence"):
            for kind in ("q_a", "qa_r"):
                right = row[f"shortcut_{level}_{kind}_right"]
                assert row[f"shortcut_{level}_{kind}"] == {2: "Biased", 1: "Neutral", 0: "Non-Biased"}[right]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["shortcuts"]["options"]["seeds"] == [0] and len(manifest["shortcuts"]["runs"]) == 8
    card = (out / "README.md").read_text()
    assert "config_name: shortcuts" in card and "## Language-shortcut labels" in card
    assert "| Sentence-level (QA->R) |" in card and "| Word-level (Q->A) |" in card
    assert (out / "default" / "val-00000-of-00001.parquet").read_bytes() == \
        (vcr_built / "default" / "val-00000-of-00001.parquet").read_bytes()
    code, stdout, err = cli("verify", out)
    assert code == 0, err + stdout

    code, _, err = cli("predict", "vcr", "--data", out, "--model", "baseline:overlap", "--out", tmp_path / "p.json")
    assert code == 0, err
    code, _, err = cli("evaluate", "vcr", "--data", out, "--predictions", tmp_path / "p.json",
                       "--by", "shortcut_sentence_q_a", "--report", tmp_path / "report")
    assert code == 0, err
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    groups = metrics["by"]["groups"]
    assert sum(g["rows"] for g in groups.values()) == metrics["items"]
    # the groups' Q->A accuracies average back to the overall one, weighted by rows
    assert sum(g["q_a"] * g["rows"] for g in groups.values() if "q_a" in g) / metrics["items"] == \
        pytest.approx(metrics["q_a"], abs=1e-3)
    assert "## By shortcut_sentence_q_a" in (tmp_path / "report" / "report.md").read_text()
    code, _, err = cli("predict", "vcr", "--data", out, "--model", "baseline:random", "--out", tmp_path / "r.json")
    assert code == 0, err
    code, _, err = cli("compare", "vcr", "--data", out, "--predictions", tmp_path / "p.json", "--predictions",
                       tmp_path / "r.json", "--by", "shortcut_sentence_q_a", "--bootstrap", "100", "--report",
                       tmp_path / "cmp")
    assert code == 0, err
    compared = json.loads((tmp_path / "cmp" / "metrics.json").read_text())["by"]
    assert set(compared["groups"]) <= {"Biased", "Neutral", "Non-Biased"}
    assert sum(g["rows"] for g in compared["groups"].values()) == metrics["items"]
    code, _, err = cli("perceptual", "vcr", "--data", out, "--model", "baseline:overlap", "--by", "shortcut_word_qa_r",
                       "--repeats", "1", "--permutations", "1", "--report", tmp_path / "ps")
    assert code == 0, err
    by = json.loads((tmp_path / "ps" / "metrics.json").read_text())["by"]
    assert by["column"] == "shortcut_word_qa_r" and set(by["groups"]) <= {"Biased", "Neutral", "Non-Biased"}


@pytest.mark.slow
def test_vcr_visor_takes_its_models_from_vcr_train(encoders, vcr_built, built, cli, tmp_path):
    visor = built("vcr-visor")
    code, _, err = cli("shortcuts", "vcr-visor", "--data", visor, "--out", tmp_path / "out")
    assert code == 2 and "no train split" in err and "--train" in err and len(err.strip().splitlines()) == 1
    code, stdout, err = cli("shortcuts", "vcr-visor", "--data", visor, "--out", tmp_path / "out", "--train",
                            vcr_built, "--model", encoders["bert"], "--seed", "0", "--epochs", "1")
    assert code == 0, err
    metrics = json.loads((tmp_path / "out" / "manifest.json").read_text())["shortcuts"]
    assert metrics["trained_on"].startswith("vcr ") and metrics["runs"][0]["train_examples"] == 2 * 240
    assert "| Sentence-level (sub-questions) |" in (tmp_path / "out" / "README.md").read_text()


@pytest.mark.slow
def test_vcr_visor_takes_its_vcr_items_labels_by_id(vcr_labelled, built, cli, tmp_path):
    """A sub-question takes the label of its VCR item: Q->A's for causal and temporal, QA->R's for
    explanatory (the kinds VCR-Visor draws them from, §3.1)."""
    visor = built("vcr-visor")
    code, stdout, err = cli("shortcuts", "vcr-visor", "--data", visor, "--out", tmp_path / "out", "--labels-from",
                            vcr_labelled)
    assert code == 0, err
    vcr = {r["annot_id"]: r for r in pq.read_table(vcr_labelled / "shortcuts" / "val-00000-of-00001.parquet")
           .to_pylist()}
    rows = pq.read_table(visor / "default" / "val-00000-of-00001.parquet").to_pylist()
    labels = pq.read_table(tmp_path / "out" / "shortcuts" / "val-00000-of-00001.parquet").to_pylist()
    assert [r["id"] for r in labels] == [r["id"] for r in rows]
    for row, label in zip(rows, labels):
        kind = "qa_r" if row["reasoning_type"] == "explanatory" else "q_a"
        for level in ("word", "sentence"):
            assert label[f"shortcut_{level}_choice"] == vcr[row["annot_id"]][f"shortcut_{level}_{kind}"]
    code, stdout, err = cli("verify", tmp_path / "out")
    assert code == 0, err + stdout
    code, _, err = cli("shortcuts", "vcr-visor", "--data", visor, "--out", tmp_path / "o2", "--labels-from", visor)
    assert code == 2 and "expected a vcr folder written by `vlbench shortcuts vcr`" in err


@pytest.mark.slow
def test_socialiq_questions_are_labelled_by_their_a4_examples(encoders, sample_sources, cli, tmp_path):
    """Social-IQ: each correct answer with the question's three incorrect ones is an A4 example
    (Zadeh et al., CVPR 2019); every answer row of a question carries the question's label, so
    `evaluate --by` splits whole questions and A2 recombines from the groups."""
    from core.data import load_table
    from evaluator.socialiq.task import SocialIQTask

    built = tmp_path / "socialiq"
    run_build("socialiq", sample_sources, built)
    table = load_table(built, "answers", "validation")
    a4 = SocialIQTask().choice_questions(table)["a4"]
    assert len(a4) == 4 * table.num_rows // 7 and all(len(c) == 4 for c in a4.candidates)
    first = table.slice(0, 7).to_pylist()
    assert a4.contexts[0] == first[0]["question"] and a4.labels[0] == 0
    assert a4.candidates[0] == [first[0]["answer"], *(r["answer"] for r in first if r["label"] == 0)]
    assert a4.rows[:7] == ((0, 1, 2, 3),) * 7
    code, _, err = cli("shortcuts", "socialiq", "--data", built, "--out", tmp_path / "out", "--model",
                       encoders["bert"], "--seed", "0", "--seed", "1", "--epochs", "1")
    assert code == 0, err
    labels = pq.read_table(tmp_path / "out" / "shortcuts" / "validation-00000-of-00001.parquet").to_pylist()
    assert [r["id"] for r in labels] == table.column("id").to_pylist()
    for k in range(0, len(labels), 7):
        question = labels[k:k + 7]
        for level in ("word", "sentence"):
            assert len({r[f"shortcut_{level}_a4"] for r in question}) == 1
            right = question[0][f"shortcut_{level}_a4_right"]  # of 2 runs x 4 examples
            assert question[0][f"shortcut_{level}_a4"] == ("Biased" if right == 8 else "Non-Biased" if right == 0
                                                            else "Neutral")
    code, _, err = cli("predict", "socialiq", "--data", tmp_path / "out", "--model", "baseline:answer-sentiment",
                       "--out", tmp_path / "p.json")
    assert code == 0, err
    code, _, err = cli("evaluate", "socialiq", "--data", tmp_path / "out", "--predictions", tmp_path / "p.json",
                       "--by", "shortcut_sentence_a4", "--report", tmp_path / "report")
    assert code == 0, err
    metrics = json.loads((tmp_path / "report" / "metrics.json").read_text())
    groups = metrics["by"]["groups"].values()
    assert sum(g["pairs"] for g in groups) == metrics["pairs"]
    assert sum(g["a2"] * g["pairs"] for g in groups) / metrics["pairs"] == pytest.approx(metrics["a2"], abs=1e-3)


def test_bad_input_is_one_line(cli, built, vcr_built, tmp_path):
    gqa = built("gqa-ood")
    code, _, err = cli("shortcuts", "gqa-ood", "--data", gqa, "--out", tmp_path / "o")
    assert code == 2 and "no answer candidates" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("shortcuts", "vcr", "--data", vcr_built, "--out", tmp_path / "o", "--split", "train")
    assert code == 2 and "--split train" in err
    code, _, err = cli("shortcuts", "vcr", "--data", vcr_built, "--out", vcr_built / "inside")
    assert code == 2 and "--data" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("shortcuts", "vcr", "--data", vcr_built, "--out", tmp_path / "o", "--model", tmp_path / "none",
                       "--seed", "0", "--epochs", "1")
    assert_one_error_line(code, err, (f"shortcuts model {tmp_path / 'none'}: cannot load",))
    assert not (tmp_path / "o").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".o.")]


def test_pairs_are_assembled_as_the_tokenizer_encodes_them(encoders):
    """Distinct texts tokenized once (the Rust batch encoder) and assembled with numpy give the
    tokenizer's own pair encoding, truncation included, for BERT and RoBERTa."""
    import torch
    from transformers import AutoTokenizer

    from evaluator.shortcuts.labels import _batches, _encode

    questions = ChoiceQuestions(["Why is [person1] smiling at the party with both hands up?", "Rain?"],
                                [["He won.", "She is happy because the music is loud and fun.", "No.", "x"],
                                 ["Yes, it rains.", "No.", "Maybe later today.", "It is sunny"]], [1, 0])
    for family in ("bert", "roberta"):
        from builders.token_layout import pair_layout

        tok = AutoTokenizer.from_pretrained(encoders[family])
        for max_length in (128, 12):
            layout = pair_layout(tok, max_length)
            enc = _encode(TokenCache(), family, tok, layout, questions)
            (_, tensors, labels), = list(_batches(enc, layout, [0, 1], 2))
            ref = tok([c for c, cs in zip(questions.contexts, questions.candidates) for _ in cs],
                      [c for cs in questions.candidates for c in cs], padding=True, truncation="longest_first",
                      max_length=max_length, return_tensors="pt")
            for name, value in tensors.items():
                assert torch.equal(value.reshape(8, -1), ref[name]), (family, max_length, name)
            assert labels.tolist() == [1, 0]


@pytest.mark.slow
def test_two_gloo_processes_label_what_one_does(encoders, vcr_built, tmp_path):
    """The runs spread over two CPU processes (gloo) and gathered by rank 0: the same labels and card
    as one process (each run is seeded by itself)."""
    from helpers import torchrun

    outputs = {}
    for processes in (1, 2):
        out = tmp_path / f"out{processes}"
        done = torchrun(["shortcuts", "vcr", "--data", vcr_built, "--out", out, "--model", encoders["bert"],
                         "--seed", 0, "--seed", 1, "--epochs", 1], processes)
        assert done.returncode == 0, done.stderr[-3000:]
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["shortcuts"]["processes"] == processes
        outputs[processes] = ((out / "shortcuts" / "val-00000-of-00001.parquet").read_bytes(),
                              (out / "README.md").read_text(),
                              [{k: v for k, v in r.items() if k != "seconds"} for r in manifest["shortcuts"]["runs"]])
    assert outputs[1] == outputs[2]


def test_table_6_layout():
    """Table 6's layout: rows level x kind in the paper's order, columns Biased, Non-Biased, Neutral and
    the total (the values here are the paper's, e.g. sentence-level QA->R 63.6 / 14.8 / 21.6 %)."""
    from evaluator.shortcuts.run import table_6

    metrics = {"titles": {"q_a": "Q->A", "qa_r": "QA->R"},
               "shares": {"word:q_a": {"Biased": 39.2, "Neutral": 23.8, "Non-Biased": 37.0},
                          "word:qa_r": {"Biased": 29.0, "Neutral": 22.9, "Non-Biased": 48.1},
                          "sentence:q_a": {"Biased": 50.8, "Neutral": 21.8, "Non-Biased": 27.4},
                          "sentence:qa_r": {"Biased": 63.6, "Neutral": 21.6, "Non-Biased": 14.8}}}
    lines = table_6(metrics).splitlines()
    assert lines[0] == "|  | Biased (%) | Non-Biased (%) | Neutral (%) | Total (%) |"
    assert [line.split("|")[1].strip() for line in lines[2:]] == [
        "Word-level (Q->A)", "Word-level (QA->R)", "Sentence-level (Q->A)", "Sentence-level (QA->R)"]
    assert lines[-1].split("|")[2:5] == [" 63.60 ", " 14.80 ", " 21.60 "]
