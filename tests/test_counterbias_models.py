"""CounterBias (Zhang, Wang, Sang, ACM MM 2022, §3) for generative VLMs and dual encoders: the likelihood
extraction against hand-run forward passes of the same tiny models, the differentiable pixel paths
against the processors' own pixels, the PGD attack (Eq. 3) through each vision tower, batching, the
cache, the CLI, a family without a differentiable path, and a `py:` probe with a planted bias."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from helpers import counterbias_reports, tiny_vl_bias
from tiny_checkpoints import write_tiny_siglip

from evaluator.models.backend import Turn
from evaluator.models.options import ModelOptions
from evaluator.vl_bias.attack import PGD, pgd_attack
from evaluator.vl_bias.families import load_probe
from evaluator.vl_bias.generative import INSTRUCTION
from evaluator.vl_bias.probe import VisionBiasProbe, pad_images
from pipelines.tiny_models import (
    write_tiny_clip,
    write_tiny_llava,
    write_tiny_llava_next,
    write_tiny_qwen2_vl,
)

GENERATIVE = ("llava", "qwen2_vl")
DUAL = ("clip", "siglip")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("counterbias_models")
    return {**tiny_vl_bias(root), "llava": write_tiny_llava(root / "llava"),
            "qwen2_vl": write_tiny_qwen2_vl(root / "qwen2_vl"), "clip": write_tiny_clip(root / "clip"),
            "siglip": write_tiny_siglip(root / "siglip"), "llava_next": write_tiny_llava_next(root / "llava_next")}


@pytest.fixture(scope="module")
def probes(tiny) -> dict:
    return {name: load_probe(f"hf:{tiny[name]}", ModelOptions(batch_size=4)) for name in GENERATIVE + DUAL}


def _images(src: Path, n: int):
    from PIL import Image

    return [Image.open(p).convert("RGB") for p in sorted(src.rglob("*.jpg"))[:n]]


def _forward_log_probs(probe, x, assistant_ids: list[int]):
    """Hand-run: the processor's user turn with the image, the assistant's tokens appended, one forward
    pass; full-vocabulary log-probabilities at every position."""
    vlm = probe.vlm
    text = vlm.prompt_text(Turn(INSTRUCTION, (None,)))
    enc = dict(vlm.processor(text=[text], images=[[probe._carrier(x)]], return_tensors="pt"))
    enc["pixel_values"] = probe.layout.pixel_values([x])
    n = enc["input_ids"].shape[1]
    enc["input_ids"] = torch.cat([enc["input_ids"], torch.tensor([assistant_ids])], dim=1)
    enc["attention_mask"] = torch.ones_like(enc["input_ids"])
    if "mm_token_type_ids" in enc:  # Qwen2-VL's modality of each token: text after the image
        enc["mm_token_type_ids"] = torch.cat([enc["mm_token_type_ids"],
                                              torch.zeros(1, len(assistant_ids), dtype=torch.long)], dim=1)
    with torch.no_grad():
        return torch.log_softmax(vlm.model(**enc).logits[0].float(), dim=-1), n


@pytest.mark.parametrize("family", GENERATIVE)
def test_generative_next_token_probability_equals_a_hand_run_forward_pass(tiny, probes, family):
    """Golden: P(word) where the [MASK] ends the caption = P(" " | turn, "The man is") x P(first letter |
    ..., " ") -- the tiny models' character tokenizer splits the space off -- from one full forward pass.
    The caption begins the answer as the chat template writes one: after "ASSISTANT:" and a space (LLaVA's
    template), right after "assistant\n" (ChatML, Qwen2-VL's)."""
    probe = probes[family]
    assert probe.lead == {"llava": " ", "qwen2_vl": ""}[family]
    x = probe.image_tensor(_images(tiny["src"], 1)[0])
    got = probe.score([("The man is [MASK]", x)], [("cooking", "nurse")])[0]
    prefix, space = probe._ids(probe.lead + "The man is"), probe._ids(" ")
    logp, n = _forward_log_probs(probe, x, prefix + space)
    expected = [float(logp[n + len(prefix) - 1, space[0]] + logp[n + len(prefix), probe._ids(c)[0]]) for c in "cn"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", GENERATIVE)
def test_generative_mid_sentence_mask_scores_the_whole_caption(tiny, probes, family):
    """Golden: a [MASK] mid-sentence scores each filled-in caption's log-likelihood (relative scores)."""
    probe = probes[family]
    x = probe.image_tensor(_images(tiny["src"], 1)[0])
    assert not probe.normalised("A [MASK] is in the picture") and probe.normalised("The man is [MASK]")
    got = probe.score([("A [MASK] is in the picture", x)], [("man", "woman")])[0]
    for value, word in zip(got, ("man", "woman")):
        ids = probe._ids(f"{probe.lead}A {word} is in the picture")
        logp, n = _forward_log_probs(probe, x, ids)
        expected = sum(float(logp[n - 1 + j, t]) for j, t in enumerate(ids))
        assert value == pytest.approx(expected, rel=1e-5, abs=1e-4)


@pytest.mark.parametrize("family", GENERATIVE + DUAL)
def test_differentiable_pixels_equal_the_processors_own(tiny, probes, family):
    """The attack's pixel space: the processor's resize without its normalisation; the forward pass's
    normalisation (and Qwen2-VL's patch layout) gives back the processor's pixel_values."""
    probe = probes[family]
    for image in _images(tiny["src"], 3):
        x = probe.image_tensor(image)
        assert x.min() >= 0 and x.max() <= 1
        if family in GENERATIVE:
            own = probe.vlm.processor.image_processor(images=[image], return_tensors="pt")["pixel_values"]
            ours = probe.layout.pixel_values([x])
        else:
            own = probe.processor(images=[image], return_tensors="pt")["pixel_values"]
            ours = probe.pixels.pixel_values([x])
        torch.testing.assert_close(ours, own.float(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", DUAL)
def test_dual_encoder_scores_are_the_models_own_logits(tiny, probes, family):
    """Golden: the model's own forward pass (logits_per_image, without SigLIP's bias, which a softmax over
    candidates cancels) on the processor's pixels and the filled-in captions."""
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    probe = probes[family]
    image = _images(tiny["src"], 1)[0]
    got = probe.score([("The man is [MASK]", probe.image_tensor(image))], [("cooking", "nurse")])[0]
    model = AutoModel.from_pretrained(tiny[family]).eval()
    tok, proc = AutoTokenizer.from_pretrained(tiny[family]), AutoImageProcessor.from_pretrained(tiny[family])
    texts = tok(["The man is cooking", "The man is nurse"], padding="max_length",
                max_length=model.config.text_config.max_position_embeddings, return_tensors="pt")
    with torch.no_grad():
        out = model(**texts, pixel_values=proc(images=[image], return_tensors="pt")["pixel_values"])
        expected = out.logits_per_image[0] - getattr(model, "logit_bias", torch.zeros(1))
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", GENERATIVE + DUAL)
def test_attack_moves_the_bias_concept_towards_b_prime(tiny, probes, family):
    probe = probes[family]
    xs = [probe.image_tensor(im) for im in _images(tiny["src"], 8)]
    pixels, mask = pad_images(xs)
    words = ("man", "woman")
    objective = probe.attack_objective(pixels, mask, probe.bias_prompt("A [MASK] is in the picture"), words)
    if not probe.normalised(probe.bias_prompt("A [MASK] is in the picture")):
        objective = (lambda f: lambda x: torch.log_softmax(f(x), dim=-1))(objective)
    target = [1, 0] * 4
    attack = PGD(eps=8 / 255, steps=5)
    adv = pgd_attack(objective, pixels, mask, target, attack)
    with torch.no_grad():
        before, after = objective(pixels).exp(), objective(adv).exp()
    rows = torch.arange(len(xs))
    assert (after[rows, target] > before[rows, target]).float().mean().item() >= 0.75
    assert after[rows, target].mean() > before[rows, target].mean()
    delta = adv - pixels
    assert delta.abs().max().item() <= attack.eps + 1e-6 and adv.min() >= 0 and adv.max() <= 1
    assert (delta * (1 - mask.unsqueeze(1))).abs().max().item() == 0.0


@pytest.mark.parametrize("family", GENERATIVE)
def test_generative_attack_batched_equals_one_image_at_a_time(tiny, probes, family):
    probe = probes[family]
    images = _images(tiny["src"], 3)
    images[1] = images[1].resize((150, 60))  # Qwen2-VL: another patch grid, so more image tokens in its row
    xs = [probe.image_tensor(im) for im in images]
    prompt = probe.bias_prompt("A [MASK] is in the picture")
    attack = PGD(eps=4 / 255, steps=3)

    def run(batch):
        pixels, mask = pad_images(batch)
        return pgd_attack(probe.attack_objective(pixels, mask, prompt, ("man", "woman")), pixels, mask,
                          [1] * len(batch), attack)

    together = run(xs)
    for i, x in enumerate(xs):
        alone = run([x])[0]
        # gradient signs that differ at float noise flip single pixels by one step at most
        assert (alone != together[i, :, : x.shape[1], : x.shape[2]]).float().mean().item() < 1e-2
    # scores with the shared image prefix (cached keys and values) equal full sequences
    pixels, mask = pad_images(xs)
    full = probe.attack_objective(pixels, mask, prompt, ("boy", "girl", "man", "woman"))(pixels).detach().numpy()
    cached = np.stack(probe.score([(prompt, x) for x in xs], [("boy", "girl", "man", "woman")] * len(xs)))
    np.testing.assert_allclose(cached, full, rtol=1e-4, atol=1e-4)


@pytest.mark.slow  # measured twice
@pytest.mark.parametrize("family", ("qwen2_vl", "clip"))
def test_cli_report_and_cache_reuse(cli, tiny, family, tmp_path, monkeypatch):
    """The report of a generative VLM and of CLIP has ViLT's Table 2 cells; a second run takes every
    counterfactual image from the cache (no attack) and measures the same."""
    import evaluator.vl_bias.run as run

    attacked = []
    real = run.pgd_attack
    monkeypatch.setattr(run, "pgd_attack", lambda f, pixels, *a, **k: attacked.append(len(pixels)) or
                        real(f, pixels, *a, **k))
    args = ("counterbias", "--data", tiny["data"], "--model", f"hf:{tiny[family]}", "--eps", "0.03", "--steps", "3",
            "--bootstrap", "20", "--batch-size", "8")
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    code, out, err = cli(*args, "--report", tmp_path / "a")
    assert code == 0, err
    assert sum(attacked) == 40 and "B@V-L (Eq. 6)" in out
    code, _, err = cli(*args, "--report", tmp_path / "b")
    assert code == 0, err
    assert sum(attacked) == 40  # nothing attacked again
    a, b = (json.loads((tmp_path / r / "metrics.json").read_text()) for r in "ab")
    assert a["measures"] == b["measures"] and a["attack"]["raised_b_prime"] >= 0.75
    report = (tmp_path / "a" / "report.md").read_text()
    assert "| Template | Activity B@V-L | Activity B@V | Activity B@L | Occupation B@V-L |" in report
    rows = pq.read_table(tmp_path / "a" / "per_instance.parquet").to_pandas()
    np.testing.assert_allclose(rows.bias_l, -(rows.p_t_vf_lcf - rows.p_t_vf_lf))
    if family == "qwen2_vl":  # the paper's prompt, adapted to end with the word; no image for Eq. 12
        assert a["bias_prompt"] == "The person in the picture is a [MASK]" and not a["blank_image"]
        assert a["settings"]["relative_scores"] == []
    else:  # a dual encoder's every score is renormalised over the candidates
        assert "The man is [MASK]" in a["settings"]["relative_scores"] and a["blank_image"]
        # P(B | V) is a softmax over the image's pair: P(B | V) + P(B' | V) = 1 on every image, V_f and V_cf alike
        assert a["attack"]["mean_p_b_vf"] + a["attack"]["mean_p_bcf_vf"] == pytest.approx(1.0)
        assert a["attack"]["mean_p_b_vcf"] + a["attack"]["mean_p_bcf_vcf"] == pytest.approx(1.0)


def test_renormalised_generative_probabilities_are_a_softmax_over_the_target_list(tiny):
    """--softmax targets: a row's P(T | V_f, L_f) is its target's first-token probability renormalised
    over the 52 activities (or 13 occupations), computed here from the probe's own scores."""
    from evaluator.models.images import open_image
    from evaluator.vl_bias.run import Concept, CounterBiasOptions, load_split, measure

    folder, _, table = load_split(str(tiny["data"]), None)
    probe = load_probe(f"hf:{tiny['llava']}", ModelOptions(batch_size=8))
    concept = Concept.of(folder, table)
    assert len(concept.targets["activity"]) == 52 and len(concept.targets["occupation"]) == 13
    result = measure(table, probe, CounterBiasOptions(attack=None, softmax="targets"), concept)
    out = result["columns"]
    for r in (0, 17, len(table) - 1):
        image = open_image(table.column("image")[r].as_py()["bytes"])
        kind = out["target_type"][r]
        scores = probe.score([(out["caption"][r], probe.image_tensor(image))], [concept.targets[kind]])[0]
        expected = np.exp(scores - np.logaddexp.reduce(scores))[concept.targets[kind].index(out["target"][r])]
        assert out["p_t_vf_lf"][r] == pytest.approx(expected, rel=1e-6)


def test_a_family_without_a_differentiable_path_is_one_error_line(cli, tiny, tmp_path):
    code, _, err = cli("counterbias", "--data", tiny["data"], "--model", f"hf:{tiny['llava_next']}", "--no-cache")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "no differentiable image path for a llava_next model" in err and "--attack none" in err
    code, out, err = cli("counterbias", "--data", tiny["data"], "--model", f"hf:{tiny['llava_next']}",
                         "--attack", "none", "--report", tmp_path / "n", "--bootstrap", "0")
    assert code == 0, err
    metrics = json.loads((tmp_path / "n" / "metrics.json").read_text())
    assert list(metrics["measures"]) == ["l", "l_log"] and metrics["attack"] is None


class PlantedProbe(VisionBiasProbe):
    """A `py:` probe with a planted visual bias: P(man | V) = sigmoid(12 (mean pixel - 0.5)) (and the other
    words of a pair share what is left), P(T | V, L) = 0.4 + BETA[T] x P(male side | V), whatever the
    caption says. Eq. 9 then gives exactly BETA[T] for every instance of either side (for a female-side
    image the bias concept and the change of P(T) have opposite signs, and Eq. 7 flips the sign back)."""

    BETA = {"cooking": -0.3, "nurse": -0.2, "engineer": 0.25}
    name, fingerprint, batch_size = "py:planted", "planted-v1", 8

    @property
    def device(self):
        return torch.device("cpu")

    def image_tensor(self, image):
        return torch.from_numpy(np.asarray(image.resize((16, 16)), dtype=np.float32) / 255).permute(2, 0, 1)

    def blank_image(self):
        return torch.full((3, 16, 16), 0.5)

    @staticmethod
    def _male(x):
        return torch.sigmoid(12 * (x.mean(dim=(-3, -2, -1)) - 0.5))

    def _word(self, male, word: str):
        if word in ("man", "boy"):
            return male.log()
        if word in ("woman", "girl"):
            return (1 - male).log()
        return torch.log(0.4 + self.BETA.get(word, 0.0) * male)

    def score(self, queries, candidates):
        return [torch.stack([self._word(self._male(image), w) for w in cands]).double().numpy()
                for (_, image), cands in zip(queries, candidates)]

    def attack_objective(self, pixels, pixel_mask, text, words):
        return lambda x: torch.stack([self._word(self._male(x), w) for w in words], dim=1)


def planted_probe():
    return PlantedProbe()


def test_a_planted_visual_bias_is_measured_with_its_sign_and_size(cli, tiny, tmp_path):
    code, out, err = cli("counterbias", "--data", tiny["data"], "--model", "py:test_counterbias_models:planted_probe",
                         "--eps", "0.1", "--steps", "10", "--no-cache", "--report", tmp_path / "p", "--bootstrap", "0")
    assert code == 0, err
    metrics = json.loads((tmp_path / "p" / "metrics.json").read_text())
    v = metrics["measures"]["v"]["per_target_avg"]
    for target, beta in PlantedProbe.BETA.items():
        kind = "occupation" if target in ("nurse", "engineer") else "activity"
        assert v[kind][target] == pytest.approx(beta, abs=1e-6), target  # planted sign and size (Eq. 9 / Eq. 7)
    assert v["activity"]["fishing"] == pytest.approx(0.0, abs=1e-9)
    assert metrics["measures"]["l"]["avg"] == {"activity": 0.0, "occupation": 0.0}  # captions are ignored
    assert metrics["attack"]["raised_b_prime"] == 1.0


CONCEPT_PARAMS = ("bias_pairs=grass:ground", "bias_classes=grass,ground", "target_lists=annotations",
                  "templates=A photo of a [MASK] on the {bias},On the {bias} there is a [MASK]",
                  "bias_prompt=The animal stands on the [MASK]")


def test_another_concept_pair_builds_and_is_measured(cli, tiny, tmp_path):
    """§6, Fig. 9: animals (horse, cow) against their background (grass, ground), from a VL-Bias-format
    annotation file of generated images; the report's sides, words and templates come from the data."""
    from builders.vl_bias.samples import write_animal_background

    source = write_animal_background(tmp_path / "src", per_pair=3)
    params = [a for p in CONCEPT_PARAMS for a in ("--param", p)]
    code, _, err = cli("build", "vl-bias", "--source", source, "--out", tmp_path / "data", *params)
    assert code == 0, err
    rows = pq.read_table(tmp_path / "data" / "default" / "test-00000-of-00001.parquet").to_pylist()
    assert len(rows) == 2 * 2 * 3 * 2  # animals x backgrounds x images x templates
    row = next(r for r in rows if r["image_id"] == "images/cow_ground_01.jpg" and r["template"].startswith("On"))
    assert (row["caption"], row["counterfactual_caption"], row["bias_class"], row["target_type"]) == \
        ("On the ground there is a [MASK]", "On the grass there is a [MASK]", "ground", "animal")
    card = (tmp_path / "data" / "README.md").read_text()
    assert "grass <-> ground" in card and "| cow | animal | 3 | 3 | 6 |" in card
    assert "for another concept pair" in card and "Gendered image-caption pairs" not in card
    code, _, err = cli("build", "vl-bias", "--source", source, "--out", tmp_path / "strict")  # VL-Bias lists
    assert code == 2 and "unknown target type 'animal'" in err and "target_lists=annotations" in err

    for family in ("clip", "llava"):
        code, out, err = cli("counterbias", "--data", tmp_path / "data", "--model", f"hf:{tiny[family]}",
                             "--eps", "0.03", "--steps", "3", "--no-cache", "--report", tmp_path / family,
                             "--bootstrap", "20")
        assert code == 0, err
        metrics = json.loads((tmp_path / family / "metrics.json").read_text())
        assert metrics["concept"] == {"b0": "grass", "b1": "ground", "pairs": [["grass", "ground"]],
                                      "target_types": {"animal": 2}}
        assert metrics["bias_prompt"] == "The animal stands on the [MASK]"  # not the gender adaptation
        assert set(metrics["measures"]["vl"]["per_target_avg"]["animal"]) == {"horse", "cow"}
        report = (tmp_path / family / "report.md").read_text()
        assert "+ = grass-leaning" in report and "| A photo of a [MASK] on the {bias} |" in report
        assert "male" not in report
    # the mid-sentence template is scored as a whole caption by the generative VLM (relative), the other not
    assert metrics["settings"]["relative_scores"] == ["A photo of a [MASK] on the grass",
                                                      "A photo of a [MASK] on the ground"]


@pytest.mark.slow  # two models measured
def test_clip_next_to_a_generative_vlm_in_one_comparison(cli, tiny, tmp_path):
    """Table 2 cells of two families on the same split side by side (counterbias-compare), with the note
    that a dual encoder's probabilities are renormalised over the candidates."""
    counterbias_reports(cli, tiny["data"], {n: tiny[n] for n in ("llava", "clip")}, tmp_path, "--eps", "0.03",
                        "--steps", "2")
    code, _, err = cli("counterbias-compare", tmp_path / "llava", tmp_path / "clip", "--out", tmp_path / "both",
                       "--bootstrap", "50")
    assert code == 0, err
    clip = json.loads((tmp_path / "clip" / "metrics.json").read_text())
    both = json.loads((tmp_path / "both" / "metrics.json").read_text())
    cell = both["measures"]["vl"]["occupation"]["avg"]
    assert cell["b"] == pytest.approx(clip["measures"]["vl"]["avg"]["occupation"])
    assert "renormalised over the candidates" in (tmp_path / "both" / "report.md").read_text()
