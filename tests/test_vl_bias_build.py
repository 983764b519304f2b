"""VL-Bias builder (Zhang, Wang, Sang, ACM MM 2022, §4.1, Table 1): folder and annotation-file layouts,
captions, card, bad input."""

from __future__ import annotations

import csv
import json
import random
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from builders.vl_bias.samples import write_vl_bias
from builders.vl_bias.words import ACTIVITIES, OCCUPATIONS


@pytest.fixture
def source(tmp_path) -> Path:
    write_vl_bias(tmp_path / "vl_bias", per_gender=1)
    return tmp_path / "vl_bias"


def _table(out: Path):
    return pq.read_table(out / "default" / "test-00000-of-00001.parquet")


def test_word_lists_are_the_release_readme_lists(reference_dir):
    """Source: shared/reference/vl_bias/{activities_52,occupations_13}.txt, verbatim from the official README."""
    ref = reference_dir / "vl_bias"
    assert ACTIVITIES == tuple((ref / "activities_52.txt").read_text().split())
    assert OCCUPATIONS == tuple((ref / "occupations_13.txt").read_text().split())
    assert len(ACTIVITIES) == 52 and len(OCCUPATIONS) == 13
    code = json.loads((ref / "code_prompts_and_formats.json").read_text())
    from builders.vl_bias.words import BIAS_PROMPT, GENDER_PAIRS

    assert BIAS_PROMPT == code["gender_probe_prompt"]
    assert [p.split(":") for p in GENDER_PAIRS] == code["gender_swap_pairs"]


def test_rows_captions_and_card(cli, source, tmp_path):
    code, out, err = cli("build", "vl-bias", "--source", source, "--out", tmp_path / "out")
    assert code == 0, err
    t = _table(tmp_path / "out").to_pylist()
    assert len(t) == 10 * 4 * 4  # 10 targets x 4 gender words x 1 image, x 4 templates
    row = next(r for r in t if r["image_id"] == "activity/cooking/woman/cooking_woman_00.jpg"
               and r["template"] == "phrase_photo")
    assert row["caption"] == "A photo of a woman who is [MASK]"
    assert row["counterfactual_caption"] == "A photo of a man who is [MASK]"
    assert tuple(row[k] for k in ("target", "target_type", "bias_word", "bias_class", "counterfactual_bias_word")) \
        == ("cooking", "activity", "woman", "female", "man")
    assert row["bias_prompt"] == "A [MASK] is in the picture"
    assert row["id"] == "cooking:activity/cooking/woman/cooking_woman_00.jpg:phrase_photo"
    assert row["image"]["bytes"] == (source / row["image_id"]).read_bytes()
    boy = {r["template"]: r for r in t if r["bias_word"] == "boy" and r["target"] == "nurse"}
    assert {k: (r["caption"], r["counterfactual_caption"]) for k, r in boy.items()} == {
        "sentence": ("The boy is [MASK]", "The girl is [MASK]"),
        "sentence_photo": ("The boy in the photo is [MASK]", "The girl in the photo is [MASK]"),
        "phrase": ("A boy who is [MASK]", "A girl who is [MASK]"),
        "phrase_photo": ("A photo of a boy who is [MASK]", "A photo of a girl who is [MASK]")}
    card = (tmp_path / "out" / "README.md").read_text()
    assert "| nurse | occupation | 1 | 1 | 1 | 1 | 4 |" in card
    assert "| woman | female | 10 |" in card and "man <-> woman, boy <-> girl" in card
    assert "Gendered image-caption pairs for measuring social bias" in card
    assert (tmp_path / "out" / "figures" / "instances_per_target.png").is_file()
    assert cli("verify", tmp_path / "out")[0] == 0
    from datasets import load_dataset

    ds = load_dataset(str(tmp_path / "out"), split="test")
    assert ds.features["image"].__class__.__name__ == "Image" and ds[0]["image"].size == (48, 40)


def _annotations(source: Path) -> list[dict]:
    return [{"image": p.relative_to(source).as_posix(), "target": p.parts[-3], "target_type": p.parts[-4],
             "gender": p.parts[-2]} for p in sorted(source.rglob("*.jpg"))]


def test_annotation_files_give_the_folder_build_in_any_order(cli, source, tmp_path):
    """CSV and JSONL (rows shuffled) list the same images: byte-identical tables to the folder layout."""
    assert cli("build", "vl-bias", "--source", source, "--out", tmp_path / "folders", "--no-cache")[0] == 0
    records = _annotations(source)
    random.Random(1).shuffle(records)
    with open(source / "annotations.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["gender", "image", "target_type", "target"])
        writer.writeheader()
        writer.writerows(records)
    records.reverse()
    (source / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    for name, arg in (("csv", source), ("jsonl", source / "labels.jsonl")):
        code, _, err = cli("build", "vl-bias", "--source", arg, "--out", tmp_path / name, "--no-cache")
        assert code == 0, err
        a, b = tmp_path / "folders" / "default", tmp_path / name / "default"
        assert (a / "test-00000-of-00001.parquet").read_bytes() == (b / "test-00000-of-00001.parquet").read_bytes()
    manifest = json.loads((tmp_path / "csv" / "manifest.json").read_text())
    assert manifest["inputs"][0]["source"] == "annotations" and manifest["inputs"][0]["path"] == "annotations.csv"


def test_further_gender_pairs_and_templates(cli, source, tmp_path):
    shutil.copytree(source / "activity" / "cooking" / "man", source / "activity" / "cooking" / "gentleman")
    code, _, err = cli("build", "vl-bias", "--source", source, "--out", tmp_path / "out")
    assert code == 2 and "unknown bias word 'gentleman'" in err and "cooking/gentleman" in err
    code, _, err = cli("build", "vl-bias", "--source", source, "--out", tmp_path / "out",
                       "--param", "bias_pairs=man:woman,boy:girl,gentleman:lady",
                       "--param", "templates=sentence,phrase")
    assert code == 0, err
    t = _table(tmp_path / "out").to_pylist()
    assert {r["template"] for r in t} == {"sentence", "phrase"}
    g = [r for r in t if r["bias_word"] == "gentleman"]
    assert len(g) == 2 and g[0]["counterfactual_caption"] == "The lady is [MASK]" and g[0]["bias_class"] == "male"
    assert "gentleman <-> lady" in (tmp_path / "out" / "README.md").read_text()


@pytest.mark.parametrize("case", ["unknown-gender", "unknown-target", "unknown-type", "bad-image", "csv-field",
                                  "csv-target", "jsonl-json", "csv-image-missing", "bad-pair"])
def test_bad_input_is_one_line_exit_2_and_no_output(cli, source, tmp_path, case):
    extra = []
    if case == "unknown-gender":
        (source / "activity" / "cooking" / "woman").rename(source / "activity" / "cooking" / "female")
        expected = "unknown bias word 'female'"
    elif case == "unknown-target":
        shutil.copytree(source / "activity" / "cooking", source / "activity" / "juggling")
        expected = "target 'juggling' is not one of the 52 VL-Bias activity words"
    elif case == "unknown-type":
        (source / "activity").rename(source / "hobby")
        expected = "hobby/cooking/boy: unknown target type 'hobby' (expected activity or occupation"
    elif case == "bad-image":
        (source / "occupation" / "nurse" / "girl" / "nurse_girl_00.jpg").write_bytes(b"\xff\xd8not a jpeg")
        expected = "nurse_girl_00.jpg: not a readable image"
    elif case in ("csv-field", "csv-target", "csv-image-missing"):
        rows = _annotations(source)
        if case == "csv-field":
            rows[3]["gender"] = ""
        elif case == "csv-target":
            rows[3]["target"] = "dancing"
        else:
            rows[3]["image"] = "nowhere.jpg"
        with open(source / "annotations.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        expected = {"csv-field": "annotations.csv: record line 5: field 'gender': missing or empty",
                    "csv-target": "annotations.csv: record line 5: field 'target': target 'dancing'",
                    "csv-image-missing": "annotations.csv: record line 5: field 'image': image file"}[case]
    elif case == "jsonl-json":
        (source / "annotations.jsonl").write_text('{"image": "a.jpg"\n')
        expected = "annotations.jsonl: record line 1: not valid JSON"
    else:
        extra = ["--param", "bias_pairs=man:man"]
        expected = "bias_pairs: bias pair 'man:man'"
    code, out, err = cli("build", "vl-bias", "--source", source, "--out", tmp_path / "out", "--no-cache", *extra)
    assert code == 2, err
    assert err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "out").exists()
