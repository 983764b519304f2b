"""Fidelity against the published GQA-OOD files in ../shared/reference/gqa_ood (git blob ids there)."""

from __future__ import annotations

import json
import random

import pytest

from pipelines.verify import git_blob_id

PUBLISHED = {  # shared/reference/gqa_ood/README.md
    "ood_testdev_all.json": "2556ba80f6a943a1b7b1230e124ffeb2629db183",
    "ood_testdev_head.json": "a337a0ee07e80379fed1956216fab2c0d058bc17",
    "ood_testdev_tail.json": "86b068c4535e7c4a7a4ba95e0e4e70306d1050d3",
}


def _raw_testdev(reference_dir, folder, shuffle: bool):
    """The published records as a raw GQA testdev file: compact, each record's key order as stored."""
    records = list(json.loads((reference_dir / "gqa_ood" / "ood_testdev_all.json").read_text()).items())
    if shuffle:
        random.Random(7).shuffle(records)
    folder.mkdir()
    (folder / "testdev_balanced_questions.json").write_text(json.dumps(dict(records), separators=(",", ":")))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", [False, True], ids=["file-order", "shuffled"])
def test_rebuild_is_byte_identical_to_published_testdev(reference_dir, tmp_path, cli, shuffle):
    src = _raw_testdev(reference_dir, tmp_path / "src", shuffle)
    out = tmp_path / "out"
    code, _, err = cli("build", "gqa-ood", "--source", src, "--out", out, "--split", "testdev",
                       "--param", "group_threshold=0.99", "--legacy-json")
    assert code == 0, err
    for name, blob in PUBLISHED.items():
        assert git_blob_id(out / "legacy" / name) == blob, name
    code, stdout, err = cli("verify", out, "--expect-published")
    assert code == 0, err
    for name in PUBLISHED:
        assert f"legacy/{name}: byte-identical to the published file" in stdout


def test_statistics_match_table_1_of_the_paper(reference_dir, tmp_path):
    """Table 1 (a) and (b), testdev rows: 2,796 / 471 / 388; head 1,733 / 471 / 365; tail 1,063 / 471 / 330."""
    from pipelines.build import run_build

    src = _raw_testdev(reference_dir, tmp_path / "src", shuffle=False)
    manifest = run_build("gqa-ood", src, tmp_path / "out", splits=["testdev"], assignments=["group_threshold=0.99"])
    ood = manifest["statistics"]["splits"]["testdev"]["ood"]
    assert ood["all"] == {"questions": 2796, "groups": 471, "images": 388}
    assert ood["head"] == {"questions": 1733, "groups": 471, "images": 365}
    assert ood["tail"] == {"questions": 1063, "groups": 471, "images": 330}
    # README of the reference: 26 groups sit exactly on the count·d = 1.2·n boundary.
    assert manifest["statistics"]["splits"]["testdev"]["boundary_groups"] == 26
    card = (tmp_path / "out" / "README.md").read_text()
    assert "| GQA-OOD | testdev | 2,796 | 471 | 388 |" in card
    assert "| GQA-OOD testdev | tail | 1,063 | 471 | 330 |" in card


def test_less_or_equal_would_move_108_questions(reference_dir):
    """The reference README: `<=` instead of `<` puts 108 questions on the wrong side."""
    from collections import Counter

    from builders.gqa_ood.rules import alpha_fraction

    records = json.loads((reference_dir / "gqa_ood" / "ood_testdev_all.json").read_text())
    groups = Counter(r["groups"]["local"] for r in records.values())
    pairs = Counter((r["groups"]["local"], r["answer"]) for r in records.values())
    distinct = Counter(g for g, _ in pairs)
    bound = 1 + alpha_fraction(0.2)
    on_boundary = sum(c for (g, _), c in pairs.items() if c * distinct[g] == bound * groups[g])
    assert on_boundary == 108


def test_published_alpha_file_is_a_subset_of_consistent_groups(reference_dir):
    """val_bal_tail_-0.7.json: 1,358 questions in 292 groups, as its README row says."""
    records = json.loads((reference_dir / "gqa_ood" / "val_bal_tail_-0.7.json").read_text())
    assert len(records) == 1358
    assert len({r["groups"]["local"] for r in records.values()}) == 292
    assert git_blob_id(reference_dir / "gqa_ood" / "val_bal_tail_-0.7.json") == \
        "451a786667eefe4d165f52919e24ea3051015b05"
