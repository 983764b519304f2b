"""Hand-computed goldens for every rule of the GQA-OOD build (Kervadec et al., CVPR 2021, and the authors' code)."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from builders.gqa_ood.builder import GQAOODParams, select
from builders.gqa_ood.rules import (
    alpha_fraction,
    entropy_threshold,
    normalized_entropy,
    reasoning_label,
    tail_flags_authors_float,
    tail_mask,
)


def test_single_answer_group_has_entropy_one():
    # d = 1: the authors divide the entropy by itself, giving exactly 1.0.
    assert normalized_entropy([7]) == 1.0


def test_entropy_keeps_the_epsilon_inside_the_log():
    # Two equal answers: H = -2 * 0.5 * ln(0.5 + 1e-9) = ln 2 - 2e-9 (to first order), so ne < 1.
    ne = normalized_entropy([1, 1])
    assert ne == pytest.approx(1 - 2e-9 / math.log(2), abs=1e-15)
    assert ne != 1.0
    # (3, 1): by hand, -(0.75 ln(0.75 + 1e-9) + 0.25 ln(0.25 + 1e-9)) / ln 2.
    expected = -(0.75 * math.log(0.75 + 1e-9) + 0.25 * math.log(0.25 + 1e-9)) / math.log(2)
    assert normalized_entropy([3, 1]) == pytest.approx(expected, rel=1e-15)
    assert normalized_entropy([3, 1]) == pytest.approx(0.8112781244591328, abs=1e-8)


def test_entropy_does_not_depend_on_answer_order():
    assert normalized_entropy([5, 3, 1, 1]) == normalized_entropy([1, 3, 1, 5])


def test_threshold_uses_population_std():
    # mean 0.5; population std sqrt((0.09 + 0.01 + 0.16) / 3) = 0.294392...; sample std would be 0.360555...
    assert entropy_threshold([0.2, 0.4, 0.9]) == pytest.approx(0.5 - math.sqrt(0.26 / 3), abs=1e-12)
    assert entropy_threshold([0.2, 0.4, 0.9]) == pytest.approx(0.2056080, abs=1e-7)


def test_boundary_answer_is_head_in_exact_arithmetic():
    # counts (2, 4, 3, 1): n = 10, d = 4. count 3 gives 3 * 4 = 12 = 1.2 * 10: not < 1.2 n, so head.
    assert list(tail_mask([2, 4, 3, 1], 4, 10, 0.2)) == [True, False, False, True]
    # The authors' float test: 0.3 < 0.25 * 1.2 = 0.30000000000000004 -> tail.
    assert tail_flags_authors_float([2, 4, 3, 1], 0.2) == [True, False, True, True]


def test_alpha_is_read_as_the_decimal_written():
    assert alpha_fraction(0.2) == pytest.approx(0.2) and alpha_fraction(0.2).denominator == 5
    assert 1 + alpha_fraction(-0.7) == alpha_fraction(0.3)


def test_reasoning_labels_follow_fig5_footnote():
    # rareness = count * d / n: 13 * 2 / 20 = 1.3 head, 12 * 2 / 20 = 1.2 borderline, 7 * 2 / 20 = 0.7 tail
    assert reasoning_label(13, 2, 20) == "head"
    assert reasoning_label(12, 2, 20) == "borderline"
    assert reasoning_label(8, 2, 20) == "borderline"
    assert reasoning_label(7, 2, 20) == "tail"
    assert reasoning_label(0, 2, 20) == "tail"


def _index(rows):
    qids, answers, locals_ = zip(*rows)
    n = len(rows)
    return pa.table({"question_id": list(qids), "offset": [0] * n, "length": [0] * n, "answer": list(answers),
                     "local_group": list(locals_), "global_group": [None] * n, "image_id": ["i"] * n,
                     "structural": ["query"] * n, "semantic": ["attr"] * n})


def test_select_groups_null_local_as_none_and_keeps_ids_as_strings():
    rows = [("007", "a", None), ("10", "a", None), ("0099", "b", None), ("5", "x", "g1"), ("6", "y", "g1")]
    out = select(_index(rows), GQAOODParams(group_threshold=0.95))
    sel = out["selection"].to_pylist()
    # 'none' = the three null-group questions: (2, 1) has ne 0.918 <= 0.95; g1 (1, 1) has ne ~1 and is dropped.
    assert [r["question_id"] for r in sel] == ["007", "0099", "10"]  # string order, zeros kept
    assert {r["group_size"] for r in sel} == {3}
    # b: 1 * 2 / 3 < 1.2 -> tail; a: 2 * 2 / 3 = 1.33 -> head.
    assert [r["subset"] for r in sel] == ["head", "tail", "head"]
    assert out["summary"].column("groups")[0].as_py() == 2


def test_select_keeping_no_group_gives_empty_typed_columns():
    # A threshold below every normalised entropy (all >= 0) keeps nothing.
    rows = [(f"q{i}", a, "g1") for i, a in enumerate("aab")]
    out = select(_index(rows), GQAOODParams(group_threshold=-1.0))
    assert out["selection"].num_rows == 0 and out["summary"].column("kept_groups")[0].as_py() == 0
    assert out["selection"].schema.field("answer_count").type == pa.int32()


def test_select_threshold_mean_minus_std_over_all_groups():
    rows = [(f"q{i}", a, "g1") for i, a in enumerate("aaab")]          # ne 0.811
    rows += [(f"r{i}", a, "g2") for i, a in enumerate("ab")]           # ne ~1
    rows += [(f"s{i}", "z", "g3") for i in range(3)]                   # d = 1 -> 1.0
    out = select(_index(rows), GQAOODParams())
    expected = entropy_threshold([normalized_entropy([3, 1]), normalized_entropy([1, 1]), 1.0])
    assert out["summary"].column("threshold")[0].as_py() == expected
    assert set(r["question_id"][0] for r in out["selection"].to_pylist()) == {"q"}


def test_select_authors_float_mode_differs_exactly_at_the_boundary():
    rows = [(f"q{i}", a, "g") for i, a in enumerate("aabbbbcccd")]  # counts a2 b4 c3 d1: n = 10, d = 4
    exact = select(_index(rows), GQAOODParams(group_threshold=1.0)).get("selection").to_pylist()
    floaty = select(_index(rows), GQAOODParams(group_threshold=1.0, tail_comparison="authors-float"))
    labels = lambda sel: {r["question_id"]: r["subset"] for r in sel}  # noqa: E731
    assert labels(exact)["q6"] == "head"                               # c: 3 * 4 = 1.2 * 10
    assert labels(floaty["selection"].to_pylist())["q6"] == "tail"     # 0.3 < 0.30000000000000004
    assert {k: v for k, v in labels(exact).items() if k not in ("q6", "q7", "q8")} == \
        {k: v for k, v in labels(floaty["selection"].to_pylist()).items() if k not in ("q6", "q7", "q8")}


def test_legacy_files_are_the_authors_serialisation_of_their_records():
    """The legacy files are joined from each record's serialisation, made once: the bytes must be those of the
    authors' `json.dump(records, fp, sort_keys=True, indent=4)` (Kervadec et al.'s GQA-OOD code) of the same
    records, for synthetic GQA records and records with what JSON escapes or nests (non-ASCII, a line
    separator, quotes, empty lists and objects, exponents, big integers), in any subset and order."""
    import json
    import random

    from builders.gqa_ood.builder import _legacy_json, _record_fragments
    from builders.gqa_ood.samples import generate_split

    records = generate_split(2, 400, seed=7)
    records["9"] = {"é": "\u2028\"\\/\n", "b": {}, "a": [[], {"z": [1.5e-7, -0.0, None, True]}],
                    "n": 12345678901234567890}
    table = pa.table({"question_id": list(records), "record_json": [json.dumps(r) for r in records.values()]})
    fragments = _record_fragments(table)
    for subset in (list(records), random.Random(3).sample(list(records), 150), ["9"], []):
        expected = json.dumps({q: records[q] for q in subset}, sort_keys=True, indent=4).encode()
        assert _legacy_json(subset, fragments) == expected
