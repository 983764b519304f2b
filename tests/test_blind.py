"""Blind runs (`--no-image`), the multimodal gain (`suite --blind`) and the multimodal leakage (`suite --base-llm`) on
the report card: Chen et al., *Are We on the Right Way for Evaluating Large Vision-Language Models?*, NeurIPS 2024,
§4, MG = S(with images) - S(without), ML = max(0, S(without) - S(base LLM)); where lower is better, each the other way
round (MG = S(without) - S(with)), so both are positive for an improvement.

Goldens: a task head's blind run equals its run on an image folder where every picture is the documented neutral
image (evaluator/models/images.py); a generative VLM's blind run cannot depend on the images (two different image
folders, or none, give the same answers) while its run with images does; the card's gain equals the score with
images minus the blind predictions' score, each computed by `evaluate` on its own."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import assert_one_error_line

from evaluator.models.images import neutral_image
from evaluator.stats.bootstrap import value_at
from pipelines.tiny_models import write_tiny_llava, write_tiny_llava_language_model, write_tiny_vilt_vqa

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("blind-models")
    answers = ["yes", "no", "2", "1", "3", "white", "red", "blue", "dog", "kitchen", "tennis", "pizza"]
    llava = write_tiny_llava(root / "llava")
    return {"vilt": write_tiny_vilt_vqa(root / "vilt", answers), "llava": llava,
            "llava-lm": write_tiny_llava_language_model(llava, root / "llava-lm")}


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


def test_the_card_gives_the_multimodal_gain_and_leakage(cli, built, models, sample_sources, tmp_path):
    """MG and, with --base-llm, ML = max(0, S(blind) - S(base LLM)) (lower-is-better: S(base) - S(blind)). Goldens:
    against the LLaVA's own language model saved alone (write_tiny_llava_language_model: the same weights, asked
    the same text), the base LLM's predictions are the blind run's, byte for byte, and ML is 0 with [0, 0]; against
    another LM, ML is the blind and base predictions' scores, each from `evaluate` on its own, subtracted here."""
    data = tmp_path / "builds"
    for bench in ("vqa-v2", "socialiq", "disco"):
        shutil.copytree(built(bench), data / bench)
    images = tmp_path / "images"
    shutil.copytree(sample_sources / "coco", images / "coco")
    own, other = models["llava-lm"], write_tiny_llava_language_model(write_tiny_llava(tmp_path / "other-llava", seed=1),
                                                                     tmp_path / "other-lm")
    suite = ("suite", "--model", f"hf:{models['llava']}", "--data", data, "--images-root", images, "--no-perceptual",
             "--no-counterbias", "--bootstrap", 100)
    one, two = tmp_path / "one", tmp_path / "two"
    code, stdout, err = cli(*suite, "--out", one, "--base-llm", f"hf:{own}")  # --base-llm implies --blind
    assert code == 0, err
    card = json.loads((one / "card.json").read_text())
    for bench in ("vqa-v2", "disco"):
        row = card["benchmarks"][bench]
        gain = row["multimodal_gain"]
        # the blind predictions scored on their own: S(without); the card's headline: S(with)
        without = _evaluated(cli, data / bench, one / gain["predictions"], tmp_path / f"blind-{bench}")
        for key, entry in gain["metrics"].items():
            assert entry["without"] == pytest.approx(value_at(without, key), abs=1e-4)
            assert entry["with"] == pytest.approx(row["headline"][key]["value"], abs=1e-4)
            # one sign: a positive gain is an improvement (DISCO's MAE: lower is better, so without - with)
            sign = 1 if row["headline"][key]["higher_is_better"] else -1
            assert entry["value"] == pytest.approx(sign * (entry["with"] - entry["without"]), abs=1e-3)
            assert entry["higher_is_better"] is (sign == 1)
            assert entry["interval"] is None or entry["interval"][0] <= entry["value"] + 1e-9 <= entry["interval"][1] \
                + 2e-9
        meta = json.loads((one / "predictions" / f"{bench}.blind.meta.json").read_text())
        assert meta["options"]["no_image"] is True
        leak = row["multimodal_leakage"]
        assert (one / leak["predictions"]).read_bytes() == (one / gain["predictions"]).read_bytes()
        assert all(m["value"] == 0 and m["lead"] == 0 and m["interval"] in (None, [0.0, 0.0])
                   for m in leak["metrics"].values()) and leak["base_llm"] == f"hf:{own}"
    assert "shown no image" in card["benchmarks"]["socialiq"]["multimodal_gain"]["not_measured"]
    assert card["benchmarks"]["socialiq"]["multimodal_leakage"]["not_measured"].startswith("no blind run")
    assert "## Multimodal gain" in (one / "report.md").read_text() and "## Multimodal leakage" in \
        (one / "report.md").read_text()
    assert 'id="multimodal-gain"' in (one / "index.html").read_text() and 'id="multimodal-leakage"' in \
        (one / "index.html").read_text()
    # another base LLM into a copy: the runs with and without images are kept (made under their own keys)
    shutil.copytree(one, two)
    code, stdout, err = cli(*suite, "--out", two, "--base-llm", f"hf:{other}")
    assert code == 0, err
    assert stdout.count("(kept predictions)") == 5, stdout  # 3 runs with images, 2 blind; the base LLM's anew
    card = json.loads((two / "card.json").read_text())
    leads = []
    for bench in ("vqa-v2", "disco"):
        row = card["benchmarks"][bench]
        leak = row["multimodal_leakage"]
        base = _evaluated(cli, data / bench, two / leak["predictions"], tmp_path / f"base-{bench}")
        blind = _evaluated(cli, data / bench, two / row["multimodal_gain"]["predictions"], tmp_path / f"b-{bench}")
        for key, entry in leak["metrics"].items():
            higher = row["headline"][key]["higher_is_better"]
            lead = (value_at(blind, key) - value_at(base, key)) * (1 if higher else -1)
            assert entry["lead"] == pytest.approx(lead, abs=1e-3) and entry["value"] == pytest.approx(max(0, lead),
                                                                                                     abs=1e-3)
            assert entry["interval"] is None or (0 <= entry["interval"][0] <= entry["value"] + 1e-9
                                                 <= entry["interval"][1] + 2e-9)
            leads.append(lead)
    assert any(abs(lead) > 0.01 for lead in leads), leads  # the two LMs answer differently: the check can fail
    code, _, err = cli("suite-compare", one, two, "--out", tmp_path / "site")
    assert code == 0, err
    site = json.loads((tmp_path / "site" / "cards.json").read_text())
    labels = [c["label"] for c in site["columns"]]
    assert {"vqa-v2 MG VQA accuracy", "disco MG MAE", "vqa-v2 ML VQA accuracy", "disco ML MAE"} <= set(labels)
    assert site["cards"][1]["values"]["disco:ml:mae"]["value"] == \
        card["benchmarks"]["disco"]["multimodal_leakage"]["metrics"]["mae"]["value"]
    assert site["cards"][0]["values"]["vqa-v2:mg:accuracy"]["value"] == \
        card["benchmarks"]["vqa-v2"]["multimodal_gain"]["metrics"]["accuracy"]["value"]


def _evaluated(cli, build, predictions, report) -> dict:
    code, _, err = cli("evaluate", build.name, "--data", build, "--predictions", predictions, "--report", report)
    assert code == 0, err
    return json.loads((report / "metrics.json").read_text())


def test_a_text_only_lm_answers_blind_runs_only(cli, built, models, tmp_path):
    """A text-only causal LM runs with --no-image (as the LLaVA it came from does, bit for bit), is refused with
    pictures, and --base-llm takes only such a model (hf:, or openai: with its endpoint)."""
    data = ("vqa-v2", "--data", built("vqa-v2"), "--limit", 30)
    lm, _ = _predict(cli, tmp_path, "lm", *data, "--model", f"hf:{models['llava-lm']}", "--no-image")
    llava, _ = _predict(cli, tmp_path, "llava", *data, "--model", f"hf:{models['llava']}", "--no-image")
    assert lm == llava
    code, _, err = cli("predict", *data, "--model", f"hf:{models['llava-lm']}", "--out", tmp_path / "x.json")
    assert code == 2 and "text-only causal LM" in err and "--no-image" in err and "Traceback" not in err
    suite = ("suite", "--model", "baseline:random", "--data", tmp_path, "--out", tmp_path / "card")
    for flags, expected in ((("--base-llm", f"hf:{models['llava']}"), "not a text-only causal LM"),
                            (("--base-llm", f"vllm:{models['llava-lm']}"), "a base LLM is an hf:"),
                            (("--base-llm", "openai:base"), "--base-llm-base-url"),
                            (("--base-llm-base-url", "http://127.0.0.1:9/v1"), "no --base-llm was given"),
                            (("--base-llm", f"hf:{models['llava-lm']}", "--base-llm-base-url", "http://127.0.0.1:9/v1"),
                             "runs here")):
        code, _, err = cli(*suite, *flags)
        assert code == 2 and expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_text_lm_whose_tokenizer_outgrows_its_embeddings_is_one_line(cli, built, models, tmp_path):
    """The tiny base LLM with words of the prompts added to its tokenizer and its embeddings not resized: before, an
    IndexError traceback in the embedding lookup; now one line naming both sizes."""
    from transformers import AutoTokenizer

    grown = tmp_path / "grown-lm"
    shutil.copytree(models["llava-lm"], grown)
    tokenizer = AutoTokenizer.from_pretrained(grown)
    tokenizer.add_tokens(["What", "Question", "Answer", "the", "is"] + [f"extra{k}" for k in range(400)])
    tokenizer.save_pretrained(grown)
    code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--limit", 3, "--model", f"hf:{grown}",
                       "--no-image", "--out", tmp_path / "p.json")
    assert_one_error_line(code, err, ["its tokenizer has", "more than the", "rows of the model's input embeddings"])


@pytest.mark.slow
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_a_served_base_llm_gives_the_leakage_of_the_local_one(cli, built, models, tmp_path, socket_enabled):
    """`--base-llm openai:` with `--base-llm-base-url`: the LLaVA's own language model served by `transformers serve`
    on loopback and asked DISCO's blind prompts over HTTP answers as the same checkpoint in-process (greedy), so its
    predictions are the local base LLM's byte for byte and the card's leakage row is the same."""
    from served_helpers import transformers_serve

    data = tmp_path / "builds"
    shutil.copytree(built("disco"), data / "disco")
    suite = ("suite", "--model", f"hf:{models['llava']}", "--data", data, "--no-perceptual", "--no-counterbias",
             "--bootstrap", 100)
    local, served = tmp_path / "local", tmp_path / "served"
    code, _, err = cli(*suite, "--out", local, "--base-llm", f"hf:{models['llava-lm']}")
    assert code == 0, err
    with transformers_serve(models["llava-lm"], tmp_path / "serve.log") as url:
        code, _, err = cli(*suite, "--out", served, "--base-llm", f"openai:{models['llava-lm']}",
                           "--base-llm-base-url", url)
    assert code == 0, err
    meta = json.loads((served / "predictions" / "disco.base-llm.meta.json").read_text())
    assert meta["model"] == f"openai:{models['llava-lm']}" and meta["endpoint"] == url
    assert (served / "predictions" / "disco.base-llm.json").read_bytes() == \
        (local / "predictions" / "disco.base-llm.json").read_bytes()
    rows = [json.loads((card / "card.json").read_text())["benchmarks"]["disco"]["multimodal_leakage"]
            for card in (local, served)]
    assert rows[1]["base_llm"] == f"openai:{models['llava-lm']}"
    assert rows[0]["metrics"] == rows[1]["metrics"]


def test_a_text_lm_is_told_by_its_causal_lm_class():
    """is_text_lm: a config naming its model type's causal-LM class (or naming none, of a type that has one) is a text
    LM; a RoBERTa cross-encoder (transformers also has a RobertaForCausalLM) and a type with no causal-LM class
    (ViLT) are not."""
    from transformers import LlamaConfig, RobertaConfig, ViltConfig

    from evaluator.models.vlm_checkpoint import is_text_lm

    assert is_text_lm(LlamaConfig()) and is_text_lm(LlamaConfig(architectures=["LlamaForCausalLM"]))
    assert not is_text_lm(RobertaConfig(architectures=["RobertaForSequenceClassification"]))
    assert not is_text_lm(ViltConfig())
