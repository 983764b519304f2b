"""Blind runs (`--no-image`) and the multimodal gain on the report card (`suite --blind`): Chen et al., *Are We on
the Right Way for Evaluating Large Vision-Language Models?*, NeurIPS 2024, §4, MG = S(with images) - S(without).

Goldens: a task head's blind run equals its run on an image folder where every picture is the documented neutral
image (evaluator/models/images.py); a generative VLM's blind run cannot depend on the images (two different image
folders, or none, give the same answers) while its run with images does; the card's gain equals the score with
images minus the blind predictions' score, each computed by `evaluate` on its own."""

from __future__ import annotations

import json
import shutil

import pytest

from evaluator.models.images import neutral_image
from evaluator.stats.bootstrap import value_at
from pipelines.tiny_models import write_tiny_llava, write_tiny_vilt_vqa

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("blind-models")
    answers = ["yes", "no", "2", "1", "3", "white", "red", "blue", "dog", "kitchen", "tennis", "pizza"]
    return {"vilt": write_tiny_vilt_vqa(root / "vilt", answers), "llava": write_tiny_llava(root / "llava")}


def _images_like(source, target, content):
    """A copy of an image folder whose every picture is CONTENT(k) (the k-th file in sorted order)."""
    files = sorted(p for p in source.rglob("*") if p.is_file())
    for k, path in enumerate(files):
        out = target / path.relative_to(source)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(content(k))
    return target


def _noise(k: int) -> bytes:
    import io

    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(k).integers(0, 256, (40, 40, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _predict(cli, tmp_path, name, *args):
    out = tmp_path / f"{name}.json"
    code, _, err = cli("predict", *args, "--out", out)
    assert code == 0, err
    return json.loads(out.read_text()), json.loads(out.with_name(f"{name}.meta.json").read_text())


def test_a_task_head_sees_the_neutral_image(cli, built, models, sample_sources, tmp_path):
    data = ("vqa-v2", "--data", built("vqa-v2"), "--model", f"hf:{models['vilt']}")
    blind, meta = _predict(cli, tmp_path, "blind", *data, "--no-image")  # no --images needed
    grey = _images_like(sample_sources / "coco", tmp_path / "grey", lambda k: neutral_image())
    shown, _ = _predict(cli, tmp_path, "grey", *data, "--images", grey)
    assert blind == shown
    real, _ = _predict(cli, tmp_path, "real", *data, "--images", sample_sources / "coco")
    assert real != shown  # the pictures change the answers: the equality above can fail
    assert meta["options"]["no_image"] is True and "neutral" in meta["blind"] and "mid-grey" in meta["blind"]


def test_a_generative_vlm_is_asked_without_pictures(cli, built, models, sample_sources, tmp_path):
    data = ("vqa-v2", "--data", built("vqa-v2"), "--model", f"hf:{models['llava']}", "--limit", 40)
    noise = _images_like(sample_sources / "coco", tmp_path / "noise", _noise)
    runs = {name: _predict(cli, tmp_path, name, *data, *flags)[0]
            for name, flags in (("real", ["--images", sample_sources / "coco"]), ("noise", ["--images", noise]),
                                ("blind-real", ["--no-image", "--images", sample_sources / "coco"]),
                                ("blind-noise", ["--no-image", "--images", noise]), ("blind", ["--no-image"]))}
    assert runs["blind"] == runs["blind-real"] == runs["blind-noise"]
    assert runs["real"] != runs["noise"]  # with images the answers depend on them: the check above can fail
    _, meta = _predict(cli, tmp_path, "meta", *data, "--no-image")
    assert meta["asked"]["images"] is False and meta["blind"] == "no image: the prompt without its pictures"


def test_what_cannot_run_blind_says_so(cli, built, tmp_path):
    _, meta = _predict(cli, tmp_path, "prior", "vqa-v2", "--data", built("vqa-v2"), "--model", "baseline:prior",
                       "--no-image")
    assert meta["blind"] == "no image: a baseline reads none"
    code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--model", f"features:{tmp_path}",
                       "--no-image", "--out", tmp_path / "f.json")
    assert code == 2 and "--no-image" in err and "Traceback" not in err


def test_the_card_gives_the_multimodal_gain(cli, built, models, sample_sources, tmp_path):
    data = tmp_path / "builds"
    for bench in ("vqa-v2", "cosim-q", "socialiq"):
        shutil.copytree(built(bench), data / bench)
    images = tmp_path / "images"
    shutil.copytree(sample_sources / "coco", images / "coco")
    shutil.copytree(sample_sources / "cosim", images / "cosim")
    cards = []
    for name in ("one", "two"):
        out = tmp_path / name
        code, stdout, err = cli("suite", "--model", f"hf:{models['llava']}", "--data", data, "--out", out,
                                "--images-root", images, "--no-perceptual", "--no-counterbias", "--blind",
                                "--bootstrap", 100)
        assert code == 0, err
        cards.append(out)
    card = json.loads((cards[0] / "card.json").read_text())
    for bench in ("vqa-v2", "cosim-q"):
        row = card["benchmarks"][bench]
        gain = row["multimodal_gain"]
        # the blind predictions scored on their own: S(without); the card's headline: S(with)
        code, _, err = cli("evaluate", bench, "--data", data / bench, "--predictions", cards[0] / gain["predictions"],
                           "--report", tmp_path / f"blind-{bench}")
        assert code == 0, err
        without = json.loads((tmp_path / f"blind-{bench}" / "metrics.json").read_text())
        for key, entry in gain["metrics"].items():
            assert entry["without"] == pytest.approx(value_at(without, key), abs=1e-4)
            assert entry["with"] == pytest.approx(row["headline"][key]["value"], abs=1e-4)
            assert entry["value"] == pytest.approx(entry["with"] - entry["without"], abs=1e-3)
            assert entry["interval"] is None or entry["interval"][0] <= entry["value"] + 1e-9 <= entry["interval"][1] \
                + 2e-9
        meta = json.loads((cards[0] / "predictions" / f"{bench}.blind.meta.json").read_text())
        assert meta["options"]["no_image"] is True
    assert "shown no image" in card["benchmarks"]["socialiq"]["multimodal_gain"]["not_measured"]
    assert "## Multimodal gain" in (cards[0] / "report.md").read_text()
    assert 'id="multimodal-gain"' in (cards[0] / "index.html").read_text()
    # a rerun keeps the blind predictions, made under their own key
    code, stdout, _ = cli("suite", "--model", f"hf:{models['llava']}", "--data", data, "--out", cards[0],
                          "--images-root", images, "--no-perceptual", "--no-counterbias", "--blind", "--bootstrap", 100)
    assert code == 0 and stdout.count("(kept predictions)") == 5  # 3 runs with images, 2 blind
    code, _, err = cli("suite-compare", *cards, "--out", tmp_path / "site")
    assert code == 0, err
    site = json.loads((tmp_path / "site" / "cards.json").read_text())
    labels = [c["label"] for c in site["columns"]]
    assert "vqa-v2 MG VQA accuracy" in labels and "cosim-q MG APQ" in labels
    assert site["cards"][0]["values"]["vqa-v2:mg:accuracy"]["value"] == \
        card["benchmarks"]["vqa-v2"]["multimodal_gain"]["metrics"]["accuracy"]["value"]
