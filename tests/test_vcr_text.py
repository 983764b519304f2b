"""VCR tag rendering (hand-checked against real records of ../shared/reference/vcr) and Table 1 types."""

from __future__ import annotations

import pytest

from builders.pairing import retag_distractor
from builders.text import reasoning_types, render_reference, render_tokens


@pytest.fixture
def records(reference_dir):
    from builders.sources.vcr import read_vcr

    return {r.annot_id: r for r in read_vcr(reference_dir / "vcr" / "val_sample.jsonl").records}


@pytest.mark.parametrize("annot_id, part, expected", [
    # hand-checked against question_orig / answer_orig / rationale_orig of the same records
    ("val-35", "question", "What is [person1] thinking?"),
    ("val-35", "answer", "[person1] is wondering if [person2] is going to kiss her."),
    ("val-44", "question", "Why is [person8] walking away from the crowd of people?"),
    ("val-111", "rationale", "[person5]'s clothing suggests that she is a secretary, and her body language "
                             "indicates that she is pulling the door shut."),
    ("val-489", "question", "Do [person7] and [person6] know each other?"),
])
def test_rendered_tags_match_the_real_records(records, annot_id, part, expected):
    rec = records[annot_id]
    tokens = {"question": rec.question, "answer": rec.answer_choices[rec.answer_label],
              "rationale": rec.rationale_choices[rec.rationale_label]}[part]
    assert render_tokens(tokens, rec.objects) == expected


def test_reference_records_all_pass_the_invariants(records):
    assert len(records) == 50
    assert len({r.movie for r in records.values()}) == 14  # SOURCE.md


def test_objects_other_than_persons_render_as_class_names():
    objects = ["person", "person", "tie", "person", "chair"]
    assert render_reference([2], objects) == "tie"
    assert render_reference([0, 3], objects) == "[person1] and [person4]"
    assert render_reference([0, 1, 3], objects) == "[person1], [person2] and [person4]"
    assert render_tokens(["She", "can", "'", "t", "sit", "in", [4], "-", "free", "."], objects) == \
        "She can't sit in chair-free."


@pytest.mark.parametrize("question, expected", [
    ("Why is [person1] smiling?", {"causal"}),
    ("How did [person2] get hurt?", {"causal"}),
    ("How is [person1] feeling?", set()),            # how + feel: sentiment, excluded
    ("How does [person1] feel about [person2]?", set()),
    ("What will [person1] do next?", {"temporal"}),
    ("What did [person1] do before this?", {"temporal"}),
    ("Why did [person1] leave after the party?", {"causal", "temporal"}),
    ("What is [person1] thinking?", set()),
    ("Is [person1] showing his willingness?", set()),  # "will" inside a word is not "what will"
])
def test_reasoning_types_follow_table_1(question, expected):
    assert reasoning_types(question) == expected


def test_retagging_follows_ye_and_kovashka():
    assert retag_distractor("Why is [person3] sad?", "[person1] lost her job.") == ("[person3] lost her job.", True)
    assert retag_distractor("Why is [person3] sad?", "[person3] lost her job.") == ("[person3] lost her job.", False)
    # two persons in the query, or two in the distractor: left alone
    assert retag_distractor("Why is [person3] near [person1]?", "[person2] is sad.")[1] is False
    assert retag_distractor("Why is [person3] sad?", "[person1] left [person2].")[1] is False
    assert retag_distractor("Why is it raining?", "[person1] is sad.")[1] is False
