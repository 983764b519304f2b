"""The token ids vlbench gives a generative model are those of the family's own processor: for each tiny
family here (LLaVA-1.5's template, LLaVA-NeXT, Qwen2-VL's ChatML, Llama 3.2 Vision's Mllama with its per-token
cross-attention mask, and a template that writes BOS itself, in the shape of Gemma 3's, Idefics3's and Aya
Vision's, over a tokenizer that adds BOS), the ids of a turn with an image equal
`processor.apply_chat_template(..., tokenize=True)` on the same messages (one BOS), and one greedy answer and one
continuation's log-likelihood equal a plain transformers call (the processor's own encoding of the prompt with the
answer after it).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from helpers import assert_one_error_line
from PIL import Image

from evaluator.models.backend import Turn
from evaluator.models.options import ModelOptions
from evaluator.models.spec import hf_config
from evaluator.models.transformers_vlm import TransformersVLM
from pipelines.tiny_families import TINY_FAMILIES, VLLM_TINY_FAMILIES
from pipelines.tiny_models import LLAVA_CHAT_TEMPLATE, write_tiny_llava


def write_bos_llava(path: Path) -> Path:
    """The tiny LLaVA, its tokenizer adding BOS before every text (a post-processor, as Llama's and Gemma's do)
    and its template writing BOS first (as Gemma 3's does)."""
    from tokenizers import Tokenizer, processors

    write_tiny_llava(path)
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                             special_tokens=[("<s>", 2)])
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "chat_template.jinja").write_text("<s>" + LLAVA_CHAT_TEMPLATE)
    return path


FAMILIES = {**{k: v for k, v in TINY_FAMILIES.items() if k != "paligemma"}, "bos-template": write_bos_llava}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    path = FAMILIES[request.param](tmp_path_factory.mktemp(request.param) / "model")
    vlm = TransformersVLM(str(path), hf_config(str(path)), ModelOptions(max_new_tokens=6))
    image = tmp_path_factory.mktemp("image") / "x.png"
    Image.new("RGB", (40, 30), (200, 30, 90)).save(image)
    return request.param, vlm, image


def _reference(vlm, turn: Turn, image: Path) -> list[int]:
    messages = vlm._messages(turn)
    messages[-1]["content"][0] = {"type": "image", "image": Image.open(image).convert("RGB")}
    return vlm.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                             return_tensors="pt")["input_ids"][0].tolist()


def test_prompt_ids_are_the_processors_own(family):
    name, vlm, image = family
    turn = Turn("What is in the picture?", (image,))
    ids = vlm._encode([turn], "left")["input_ids"][0].tolist()
    reference = _reference(vlm, turn, image)
    assert list(reference) == ids
    bos = vlm.tokenizer.bos_token_id
    if bos is not None:
        assert ids.count(bos) <= 1  # never a second BOS on top of the template's


def test_an_answer_and_a_score_equal_a_plain_transformers_call(family):
    name, vlm, image = family
    turn = Turn("How many?", (image,))
    answer = vlm.generate([turn])[0]
    enc = vlm._encode([turn], "left")
    with torch.inference_mode():
        out = vlm.model.generate(**enc, max_new_tokens=6, do_sample=False, pad_token_id=vlm.tokenizer.pad_token_id)
    assert answer == vlm.tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    # the golden: the processor's own encoding of the prompt with the answer written after it (its token types,
    # Llama 3.2 Vision's cross-attention mask...), run through the model in one plain forward pass
    (score,) = vlm.score([turn], [["two", "three"]])[0][:1]
    prompt = vlm.prompt_text(turn)
    picture = [[Image.open(image).convert("RGB")]]
    whole = dict(vlm.processor(text=[prompt + vlm.answer_lead + "two"], images=picture, return_tensors="pt",
                               **vlm.special_tokens([prompt])))
    start = vlm.processor(text=[prompt], images=picture, return_tensors="pt", **vlm.special_tokens([prompt]))[
        "input_ids"].shape[1]
    ids = whole["input_ids"][0].tolist()
    assert ids[start:] == vlm.continuation_ids([prompt], ["two"])[0]
    with torch.inference_mode():
        logprobs = torch.log_softmax(vlm.model(**whole).logits.float(), dim=-1)[0]
    expected = sum(float(logprobs[k - 1, ids[k]]) for k in range(start, len(ids)))
    assert score == pytest.approx(expected, abs=1e-4)


# ---------------------------------------------------------------------------------------------
# A family without a chat template, prompted by its documented prefix: PaliGemma

@pytest.fixture(scope="module")
def paligemma(tmp_path_factory):
    from pipelines.tiny_families import write_tiny_paligemma

    path = write_tiny_paligemma(tmp_path_factory.mktemp("paligemma") / "model")
    image = tmp_path_factory.mktemp("pali-image") / "x.png"
    Image.new("RGB", (40, 30), (20, 130, 90)).save(image)
    return path, image


def test_paligemma_is_asked_in_its_prefix_format(paligemma, cli, built, sample_sources, tmp_path):
    path, _ = paligemma
    out = tmp_path / "p.json"
    code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco", "--model",
                       f"hf:{path}", "--limit", "3", "--out", out, "--log-samples")
    assert code == 0, err
    samples = [json.loads(line) for line in out.with_suffix(".samples.jsonl").read_text().splitlines()]
    assert all(s["prompt"].startswith("answer en ") and "\n" not in s["prompt"] for s in samples)
    assert json.loads(out.with_suffix(".meta.json").read_text())["asked"]["prompt_template"] == "answer en {question}"


def test_a_paligemma_answer_is_scored_as_its_causal_suffix(paligemma):
    """The golden: the processor's own encoding of the answer as a suffix (`PaliGemmaProcessor(suffix=...)`,
    token type 1, its trailing EOS dropped), run through the model in one plain forward pass."""
    path, image = paligemma
    vlm = TransformersVLM(str(path), hf_config(str(path)), ModelOptions(max_new_tokens=4))
    turn = Turn("answer en What colour is it?", (image,))
    (score,) = vlm.score([turn], [["green"]])[0]
    picture = Image.open(image).convert("RGB")
    enc = dict(vlm.processor(text=[turn.text], images=[[picture]], suffix=["green"], return_tensors="pt"))
    enc.pop("labels")
    enc = {k: (v[:, :-1] if k in ("input_ids", "attention_mask", "token_type_ids") else v) for k, v in enc.items()}
    suffix = enc["token_type_ids"][0].tolist().index(1)
    with torch.inference_mode():
        logprobs = torch.log_softmax(vlm.model(**enc).logits.float(), dim=-1)[0]
    ids = enc["input_ids"][0].tolist()
    expected = sum(float(logprobs[k - 1, ids[k]]) for k in range(suffix, len(ids)))
    assert score == pytest.approx(expected, abs=1e-4)
    answer = vlm.generate([turn])[0]
    plain = dict(vlm.processor(text=[turn.text], images=[[picture]], return_tensors="pt"))
    plain.pop("labels", None)
    with torch.inference_mode():
        out = vlm.model.generate(**plain, max_new_tokens=4, do_sample=False)
    assert answer == vlm.tokenizer.decode(out[0, plain["input_ids"].shape[1]:], skip_special_tokens=True)


def test_paligemma_through_vllm_or_with_a_system_turn_is_one_line(paligemma, cli, built, sample_sources, tmp_path):
    path, _ = paligemma
    for args, needle in ((("--model", f"vllm:{path}"), "prompted by its prefix format, which vllm: does not build"),
                         (("--model", f"hf:{path}", "--system-prompt", "Be brief."), "--system-prompt:")):
        code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--out", tmp_path / "p.json", "--limit", "1",
                           "--images", sample_sources / "coco", *args)
        assert_one_error_line(code, err, [needle])


def test_the_tiny_families_the_docs_list_are_those_families(tmp_path):
    """The docs' families table marks these model types as run in the tests: each writer makes that family."""
    for model_type, write in TINY_FAMILIES.items():
        assert hf_config(str(write(tmp_path / model_type))).model_type == model_type


def test_a_processor_loaded_without_its_video_part_keeps_its_saved_settings(tmp_path):
    """Without torchvision a LLaVA-OneVision processor is rebuilt from its image and text parts: the settings
    its processor_config.json saves (the image-token count, the feature strategy, the aspect-ratio rule) are
    kept, not replaced by the class defaults (None, None, anyres_max_9)."""
    import importlib.util

    from transformers import (
        LlavaOnevisionConfig,
        LlavaOnevisionImageProcessorPil,
        LlavaOnevisionProcessor,
    )

    from evaluator.models.vlm_checkpoint import load_processor
    from pipelines.tiny_models import _char_tokenizer

    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed: the processor loads whole (the locked environment has none)")
    LlavaOnevisionConfig().save_pretrained(tmp_path)
    tokenizer = _char_tokenizer(["<unk>", "<pad>", "<s>", "</s>", "<image>", "<video>"],
                                {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>",
                                 "image_token": "<image>", "video_token": "<video>"})
    attributes = ["image_processor", "tokenizer"]
    saving = type("LlavaOnevisionProcessor", (LlavaOnevisionProcessor,),
                  {"get_attributes": classmethod(lambda cls: attributes)})
    saving(image_processor=LlavaOnevisionImageProcessorPil(), tokenizer=tokenizer, num_image_tokens=7,
           vision_feature_select_strategy="full", vision_aspect_ratio="anyres_max_4",
           chat_template=LLAVA_CHAT_TEMPLATE).save_pretrained(tmp_path)
    # as the hub's checkpoints: a video processor beside it, which needs torchvision
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps(
        {"video_processor_type": "LlavaOnevisionVideoProcessor", "processor_class": "LlavaOnevisionProcessor"}))
    processor, note = load_processor(str(tmp_path), LlavaOnevisionConfig())
    assert "torchvision" in note
    assert (processor.num_image_tokens, processor.vision_feature_select_strategy, processor.vision_aspect_ratio) == (
        7, "full", "anyres_max_4")
    assert processor.chat_template == LLAVA_CHAT_TEMPLATE


def test_many_continuations_scored_over_one_cached_prompt_equal_each_scored_whole(family):
    """VisDial's path (the prompt run once, its key/value cache copied for each batch of options) gives each
    family the scores of the plain path (prompt and option as one sequence): Qwen3.5's hybrid cache (linear
    attention states beside keys and values) included."""
    _, vlm, image = family
    turn = Turn("Which one?", (image,))
    options = ["yes", "no", "a red one", "two", "maybe not", "x"]
    vlm.batch_size = 4  # two batches of copies
    cached = vlm.score_cached(turn, options)
    assert cached == pytest.approx(vlm.score_full([turn] * len(options), options), abs=1e-4)
    assert len(set(cached)) == len(options)


def _askable() -> list[str]:
    from evaluator.tasks import get_task, task_names

    return [name for name in task_names() if get_task(name).generative is not None]


@pytest.fixture(scope="module")
def row_images(built, tmp_path_factory):
    """row_images(bench): a small picture for every image key of the benchmark's rows, written once."""
    from helpers import write_row_images

    folders = {}

    def images(bench: str) -> Path:
        if bench not in folders:
            folders[bench] = write_row_images(bench, built(bench), tmp_path_factory.mktemp(f"rows-{bench}"))
        return folders[bench]

    return images


@pytest.fixture(scope="module")
def socialiq_videos(sample_sources, tmp_path_factory) -> Path:
    """A 4-frame video for each video of the sample Social-IQ's validation fold."""
    from helpers import write_video

    root = tmp_path_factory.mktemp("socialiq-videos")
    folds = json.loads((sample_sources / "socialiq" / "socialiq_std_folds.json").read_text())
    for video in folds["standard_valid_fold"]:
        write_video(root / f"{video}.mp4", frames=4)
    return root


@pytest.mark.slow
def test_every_family_answers_every_benchmarks_ask(family, built, row_images, socialiq_videos, tmp_path):
    """Each family is asked every benchmark's Ask (generation, letter-free log-likelihood scoring over a shared
    prompt, VCR's two prompts, VisDial's 100 options, DISCO's count, and Social-IQ with two frames of each video,
    a prompt of two images) on the first two rows of the demo build: a prediction and a logged sample per row, and
    the metadata names the family's class."""
    from evaluator.run import predict

    name, vlm, _ = family
    runs = [(bench, {"images": row_images(bench)}) for bench in _askable()]
    for bench, options in [*runs, ("socialiq", {"videos": socialiq_videos, "frames": 2})]:
        out = tmp_path / f"{bench}.json"
        predict(bench, str(built(bench)), f"hf:{vlm.path}", out, log_samples=True, limit=2,
                options=ModelOptions(**options, max_new_tokens=3, batch_size=4))
        samples = [json.loads(line) for line in out.with_suffix(".samples.jsonl").read_text().splitlines()]
        assert len(json.loads(out.read_text())) == len(samples) == 2, (name, bench)
        assert json.loads(out.with_suffix(".meta.json").read_text())["class"] == type(vlm.model).__name__
    assert {s["frames"] for s in samples} == {2}


def _config_folder(path: Path, config) -> Path:
    """A checkpoint folder holding CONFIG and a one-tensor weights file: enough for the checks made before any
    weight is read."""
    from safetensors.torch import save_file

    config.save_pretrained(path)
    save_file({"x": torch.zeros(1)}, str(path / "model.safetensors"))
    return path


def test_families_vlbench_does_not_ask_are_one_line_each(cli, built, sample_sources, tmp_path):
    """Florence-2 (an encoder-decoder, hf: and vllm:) and Phi-4-multimodal (a multimodal causal LM transformers does
    not list as image-text-to-text): one line each naming the cause and what to do, exit 2, nothing written."""
    from transformers import AutoConfig

    cases = [("hf", _config_folder(tmp_path / "florence2", AutoConfig.for_model("florence2")),
              "a florence2 model is an encoder-decoder"),
             ("vllm", tmp_path / "florence2", "a florence2 model is an encoder-decoder"),
             ("hf", _config_folder(tmp_path / "phi4", AutoConfig.for_model("phi4_multimodal")),
              "pass openai:MODEL")]
    for kind, path, needle in cases:
        out = tmp_path / "p.json"
        code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco",
                           "--model", f"{kind}:{path}", "--limit", "1", "--out", out)
        assert_one_error_line(code, err, [needle])
        assert not out.exists()


# ---------------------------------------------------------------------------------------------
# The same through vLLM (its CPU build in its own venv: tests/test_vllm.py)

VLLM_PYTHON = os.environ.get("VLBENCH_VLLM_PYTHON")
VLLM_FAMILIES = VLLM_TINY_FAMILIES


@pytest.fixture(scope="module")
def through_vllm(tmp_path_factory):
    """(folders, image, results): each family's tiny checkpoint with heads of 32 (the weights of a CLIP or SigLIP
    tower laid out as the published checkpoints are, which vLLM reads), asked through `vllm:` in one process of
    the vLLM venv (tests/vllm_family_probe.py); results by family."""
    import subprocess

    from served_helpers import vllm_env

    from pipelines.tiny_models import vision_tower_weights_for_vllm

    if not VLLM_PYTHON:
        pytest.skip("no vLLM venv: `make test` builds it (scripts/vllm_venv.sh) and passes its Python as "
                    "VLBENCH_VLLM_PYTHON")
    root = tmp_path_factory.mktemp("vllm-families")
    folders = {name: TINY_FAMILIES[name](root / name, head_dim=32) for name in VLLM_FAMILIES}
    for name in ("llava_next", "gemma3", "llava_onevision"):
        vision_tower_weights_for_vllm(folders[name])
    image = root / "x.png"
    Image.new("RGB", (40, 30), (200, 30, 90)).save(image)
    specs = [str(folders[n]) for n in VLLM_FAMILIES] + [f"{folders['qwen3_5']}:bfloat16"]
    done = subprocess.run([VLLM_PYTHON, str(Path(__file__).parent / "vllm_family_probe.py"), str(image), "How many?",
                           *specs], env={**vllm_env(), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, capture_output=True,
                          text=True, timeout=900, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            model, _, dtype = result["model"].partition(":")
            results[Path(model).name + (f":{dtype}" if dtype else "")] = result
    return folders, image, results


def test_a_processor_transformers_offers_only_with_torchvision_and_vlbench_does_not_build_is_one_line(
        monkeypatch, cli, built, sample_sources, tmp_path):
    """Where vlbench had no build of a torchvision-only processor class (its WITHOUT_TORCHVISION emptied: Mistral 3's
    PixtralProcessor is the only such class in the locked transformers), the checkpoint is one line saying to install
    torchvision, exit 2, nothing written."""
    from evaluator.models import pixtral
    from pipelines.tiny_families import write_tiny_mistral3

    monkeypatch.setattr(pixtral, "WITHOUT_TORCHVISION", {})
    path = write_tiny_mistral3(tmp_path / "mistral3")
    out = tmp_path / "p.json"
    code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco",
                       "--model", f"hf:{path}", "--limit", "1", "--out", out)
    assert_one_error_line(code, err, ["the PixtralProcessor needs torchvision; pip install torchvision"])
    assert not out.exists()


@pytest.mark.skipif(not VLLM_PYTHON, reason="no vLLM venv (the reference PixtralProcessor needs its torchvision): "
                    "`make test` builds it (scripts/vllm_venv.sh)")
def test_mistral3_s_processor_without_torchvision_gives_transformers_own_ids(tmp_path):
    """Mistral 3 is scored here, where torchvision is missing: vlbench builds its Pixtral processor over the PIL image
    processor (evaluator/models/pixtral.py). The golden is transformers' own PixtralProcessor on the same tiny
    checkpoint, run in the vLLM venv (which has torchvision; tests/pixtral_probe.py): for images wider, taller,
    smaller and larger than the 32 px longest edge, the token ids ([IMG] per 16 px square, [IMG_BREAK] closing each
    row, [IMG_END] the last) and image sizes are equal; the pixels equal to float precision where the image needs no
    resampling (32 x 32), and within PIL's and torchvision's bicubic resampling of each other elsewhere."""
    import subprocess

    import numpy as np
    from pixtral_probe import SHAPES, TEXT, image
    from served_helpers import vllm_env

    from evaluator.models.vlm_checkpoint import load_processor
    from pipelines.tiny_families import write_tiny_mistral3

    path = write_tiny_mistral3(tmp_path / "mistral3")
    done = subprocess.run([VLLM_PYTHON, str(Path(__file__).parent / "pixtral_probe.py"), str(path)], env=vllm_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    reference = json.loads(done.stdout.strip().splitlines()[-1])
    assert reference["class"] == "PixtralProcessor"  # transformers' own, not vlbench's
    processor, note = load_processor(str(path), hf_config(str(path)))
    assert type(processor).__name__ == "ImageOnlyPixtralProcessorPil" and "PixtralProcessorPil" in note
    counts = []
    for (width, height), theirs in zip(SHAPES, reference["encoded"]):
        ours = processor(images=[image(width, height)], text=[TEXT], return_tensors="np")
        assert ours["input_ids"][0].tolist() == theirs["input_ids"], (width, height)
        assert ours["image_sizes"].tolist() == theirs["image_sizes"], (width, height)
        pixels, expected = np.asarray(ours["pixel_values"]), np.asarray(theirs["pixel_values"])
        assert pixels.shape == expected.shape
        assert np.abs(pixels - expected).max() < (1e-4 if (width, height) == (32, 32) else 0.5), (width, height)
        counts.append(theirs["input_ids"].count(processor.image_token_id))
    assert sorted(set(counts)) == [1, 2, 4]  # 1 x 1, 1 x 2 and 2 x 2 squares: the shapes exercise the rule


@pytest.mark.skipif(not VLLM_PYTHON, reason="no vLLM venv: `make test` builds it (scripts/vllm_venv.sh)")
@pytest.mark.slow
@pytest.mark.parametrize("name", VLLM_FAMILIES)
def test_a_family_through_vllm_runs_the_processors_ids_and_answers_as_transformers(name, through_vllm):
    """The token ids vLLM runs (its image placeholders expanded by vLLM) equal the processor's own
    `apply_chat_template(tokenize=True)` on the same messages; the greedy answer and the continuations'
    log-likelihoods equal `hf:`'s (float32 both; sums of per-character log-probabilities within 1e-4 per token,
    as tests/test_vllm.py measured for LLaVA). Qwen3.5 in float32 is one line (vLLM's CPU build runs its
    linear-attention layers in bfloat16 only); in bfloat16 its ids are the processor's."""
    folders, image, results = through_vllm
    vlm = TransformersVLM(str(folders[name]), hf_config(str(folders[name])), ModelOptions(max_new_tokens=6))
    turn = Turn("How many?", (image,))
    reference = _reference(vlm, turn, image)
    if name == "qwen3_5":
        assert "in bfloat16 only; pass --dtype bfloat16" in results[name]["error"]
        assert results[f"{name}:bfloat16"]["ids"] == reference
        return
    result = results[name]
    assert "error" not in result, result
    assert result["ids"] == reference
    assert result["answer"] == vlm.generate([turn])[0]
    scores = vlm.score([turn], [["two", "three"]])[0]
    assert result["scores"] == pytest.approx(scores, abs=1e-4 * len(" three"))


def test_video_settings_inside_processor_config_load_like_a_separate_file(tmp_path):
    """transformers 5's `save_pretrained` writes a processor's video settings into processor_config.json under
    `video_processor`; the hub's older checkpoints keep them in video_preprocessor_config.json. Without
    torchvision, both load with the same settings (SmolVLM's template reads its frame count and rate; before, the
    nested ones were dropped)."""
    import importlib.util

    from evaluator.models.vlm_checkpoint import load_processor
    from pipelines.tiny_families import write_tiny_smolvlm

    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed: the processor loads whole (the locked environment has none)")
    separate = write_tiny_smolvlm(tmp_path / "separate")
    nested = tmp_path / "nested"
    shutil.copytree(separate, nested)
    settings = json.loads((nested / "video_preprocessor_config.json").read_text())
    (nested / "video_preprocessor_config.json").unlink()
    processor_config = json.loads((nested / "processor_config.json").read_text())
    (nested / "processor_config.json").write_text(json.dumps({**processor_config, "video_processor": settings}))
    from transformers import AutoConfig

    loaded = [load_processor(str(folder), AutoConfig.from_pretrained(folder))[0] for folder in (separate, nested)]
    assert vars(loaded[0].video_processor) == vars(loaded[1].video_processor) == settings
    assert settings["num_frames"] == 64 and settings["fps"] == 1
    # the hub's form (SmolVLM2's video_preprocessor_config.json): the frame count and rate inside `video_sampling`
    # only, nested in processor_config.json; before, the stand-in had no num_frames and the template refused it
    hub = tmp_path / "hub"
    shutil.copytree(nested, hub)
    sampled = {k: v for k, v in settings.items() if k not in ("num_frames", "fps")}
    sampled["video_sampling"] = {"fps": 1, "max_frames": 64, "video_size": {"longest_edge": 364}}
    (hub / "processor_config.json").write_text(json.dumps({**processor_config, "video_processor": sampled}))
    processor = load_processor(str(hub), AutoConfig.from_pretrained(hub))[0]
    assert (processor.video_processor.num_frames, processor.video_processor.fps) == (64, 1)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]
    assert "What is it?" in processor.apply_chat_template(messages, add_generation_prompt=True)


def test_paligemma_on_a_benchmark_without_images_is_one_line(cli, built, tmp_path):
    """PaliGemma's processor takes no prompt without an image (`images are expected`); Social-IQ shows none unless
    --videos gives its frames: one line before any weight is read (before: the processor's ValueError after the
    weights loaded, a crash row on the report card), nothing written."""
    from pipelines.tiny_families import write_tiny_paligemma

    model = write_tiny_paligemma(tmp_path / "paligemma")
    code, _, err = cli("predict", "socialiq", "--data", built("socialiq"), "--model", f"hf:{model}", "--out",
                       tmp_path / "p.json", "--limit", "2")
    assert_one_error_line(code, err, ["a paligemma model is asked with an image in every prompt",
                                      "without --videos DIR"])
    assert not (tmp_path / "p.json").exists()
