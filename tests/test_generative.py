"""Generative VLMs (evaluator/models/transformers_vlm.py, templated.py, ask.py) with tiny random models built
offline from configs: LLaVA (a processor without a video part) and Qwen2-VL (whose video processor needs
torchvision, absent here: the image-only fallback is exercised)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import write_row_images
from PIL import Image

from evaluator.models.ask import clean_answer, parse_count
from evaluator.models.backend import Turn
from evaluator.models.options import ModelOptions
from evaluator.models.spec import hf_config
from evaluator.models.transformers_vlm import TransformersVLM
from pipelines.tiny_models import write_tiny_llava, write_tiny_qwen2_vl


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("generative")
    return {"llava": write_tiny_llava(root / "tiny-llava"), "qwen2-vl": write_tiny_qwen2_vl(root / "tiny-qwen2-vl")}


def _images(sizes, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for h, w in sizes:
        image = Image.fromarray((rng.random((h, w, 3)) * 255).astype("uint8"))
        import io

        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


QUESTIONS = ["What color is it?", "How many dogs are there in the picture?", "Is it red", "Where is the man?",
             "Why?", "What is on the table next to the lamp?"]
SIZES = [(40, 50), (90, 30), (64, 64), (20, 100), (33, 33), (120, 80)]  # mixed sizes: mixed image token counts


@pytest.mark.parametrize("text, cleaned", [
    # Hand-written goldens of the documented rule: first line, trimmed, one trailing period removed.
    ("Yes.", "Yes"), ("  two dogs \n because I see them", "two dogs"), ("red..", "red."), ("\n\nblue", "blue"),
    ("", ""), ("3.5", "3.5"), ("on the left. ", "on the left"),
])
def test_answer_cleaning(text, cleaned):
    assert clean_answer(text) == cleaned


@pytest.mark.parametrize("text, count", [
    ("3", 3.0), ("There are 12 people.", 12.0), ("two", 2.0), ("I see twenty people", 20.0), ("1,200", 1200.0),
    ("none visible", None), ("2.5 persons", 2.5), ("Seven.\n8", 7.0),
])
def test_count_parsing(text, count):
    assert parse_count(text) == count


@pytest.mark.parametrize("family", ["llava", "qwen2-vl"])
def test_batched_greedy_equals_one_at_a_time_on_mixed_image_sizes(tiny, family):
    vlm = TransformersVLM(str(tiny[family]), hf_config(str(tiny[family])), ModelOptions(batch_size=4))
    turns = [Turn(q, (im,)) for q, im in zip(QUESTIONS, _images(SIZES))]
    batched = vlm.generate(turns, 6)
    assert batched == [vlm.generate([t], 6)[0] for t in turns]
    assert len(set(batched)) > 1  # the random model answers differently per input: a real comparison


@pytest.mark.parametrize("family", ["llava", "qwen2-vl"])
def test_prefix_cached_option_scores_equal_full_sequence_scores(tiny, family):
    vlm = TransformersVLM(str(tiny[family]), hf_config(str(tiny[family])), ModelOptions(batch_size=7))
    options = [f"option {i}" * (1 + i % 3) for i in range(20)]  # uneven lengths: right padding is exercised
    for turn in [Turn(q, (im,)) for q, im in zip(QUESTIONS[:2], _images(SIZES[:2]))]:
        cached = vlm.score_cached(turn, options)
        full = vlm.score_full([turn] * len(options), options)
        assert np.max(np.abs(np.array(cached) - np.array(full))) < 1e-4
        assert len(set(np.round(full, 3))) > 1


def test_score_full_is_batch_independent(tiny):
    vlm = TransformersVLM(str(tiny["llava"]), hf_config(str(tiny["llava"])), ModelOptions(batch_size=3))
    turns = [Turn(q, (im,)) for q, im in zip(QUESTIONS, _images(SIZES))]
    answers = ["yes", "two dogs", "no", "on the left side", "because", "a cup"]
    together = vlm.score_full(turns, answers)
    alone = [vlm.score_full([t], [a])[0] for t, a in zip(turns, answers)]
    assert np.allclose(together, alone, atol=1e-4)


def test_mean_loglik_is_the_sum_over_the_token_count(tiny):
    path = str(tiny["llava"])
    turn = Turn("Is it red?", tuple(_images([(30, 40)])))
    total = TransformersVLM(path, hf_config(path), ModelOptions()).score_full([turn], ["abcd"])[0]
    mean = TransformersVLM(path, hf_config(path), ModelOptions(loglik="mean")).score_full([turn], ["abcd"])[0]
    # the tiny tokenizer is per character, and the template's answer lead (a space) begins the continuation
    assert mean == pytest.approx(total / 5, abs=1e-5)


def test_qwen2_vl_without_torchvision_loads_image_and_text_parts(tiny):
    vlm = TransformersVLM(str(tiny["qwen2-vl"]), hf_config(str(tiny["qwen2-vl"])),
                        ModelOptions(min_pixels=4 * 28 * 28, max_pixels=8 * 28 * 28))
    assert "torchvision" in vlm.note and "image and text parts only" in vlm.note
    assert vlm.describe()["image_size"] == {"shortest_edge": 4 * 28 * 28, "longest_edge": 8 * 28 * 28}


def test_disco_end_to_end_with_metadata_and_samples(cli, tiny, built, tmp_path):
    out = tmp_path / "disco.json"
    code, stdout, err = cli("predict", "disco", "--data", built("disco"), "--model", f"hf:{tiny['llava']}",
                            "--out", out, "--max-new-tokens", "3", "--log-samples")
    assert code == 0, err
    meta = json.loads((tmp_path / "disco.meta.json").read_text())
    assert meta["model"] == f"hf:{tiny['llava']}" and meta["dtype"] == "float32" and meta["device"] == "cpu"
    assert meta["asked"]["prompt_template"] == "How many people are in this image? Answer with a number."
    assert meta["asked"]["generation"] == {"greedy": True, "max_new_tokens": 3, "do_sample": False}
    assert meta["asked"]["note"] == "image only: the audio is not read"
    assert meta["versions"]["transformers"]
    predictions = json.loads(out.read_text())
    samples = [json.loads(line) for line in (tmp_path / "disco.samples.jsonl").read_text().splitlines()]
    assert len(samples) == len(predictions) == meta["rows"]
    assert [s["id"] for s in samples] == [p["id"] for p in predictions]
    assert all(s["prediction"] == (parse_count(s["output"]) or 0.0) for s in samples)
    assert meta["asked"]["unparsed_outputs"] == sum(parse_count(s["output"]) is None for s in samples)
    code, stdout, err = cli("evaluate", "disco", "--data", built("disco"), "--predictions", out,
                            "--report", tmp_path / "report")
    assert code == 0, err
    assert "one_minus_mape" in stdout
    # The report says how the predictions were made, from the record beside them.
    report = (tmp_path / "report" / "report.md").read_text()
    section = report[report.index("## How the predictions were made"):]
    assert f"- Model: `hf:{tiny['llava']}` (LlavaForConditionalGeneration, float32 on cpu, batch size 32)" in section
    assert "- Prompt template (the benchmark's default): `'How many people are in this image? Answer with a " \
           "number.'`" in section
    assert "- Answers: greedy, at most 3 new tokens" in section
    assert "- How answers were cleaned: first line of the output, trimmed, one trailing period removed; then" in section
    assert "- Note: image only: the audio is not read" in section
    record = json.loads((tmp_path / "report" / "metrics.json").read_text())["prediction_record"]
    assert record["made_on"] == {"benchmark": "disco", "data": str(built("disco")), "split": "test",
                                 "rows": meta["rows"]}
    assert record["unparsed_outputs"] == meta["asked"]["unparsed_outputs"]


def test_a_damaged_prediction_record_is_one_line(cli, built, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = cli("predict", "disco", "--data", built("disco"), "--model", "baseline:mean", "--out", out)
    assert code == 0, err
    (tmp_path / "p.meta.json").write_text("{not json")
    code, _, err = cli("evaluate", "disco", "--data", built("disco"), "--predictions", out)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: {tmp_path / 'p.meta.json'}: not a readable prediction record")


@pytest.mark.slow
def test_socialiq_answer_scores_are_log_likelihoods(cli, tiny, built, tmp_path):
    out = tmp_path / "siq.json"
    code, _, err = cli("predict", "socialiq", "--data", built("socialiq"), "--model", f"hf:{tiny['qwen2-vl']}",
                       "--out", out, "--log-samples")
    assert code == 0, err
    samples = [json.loads(line) for line in (tmp_path / "siq.samples.jsonl").read_text().splitlines()]
    predictions = json.loads(out.read_text())
    assert all(p["score"] == s["loglik"][0] < 0 for p, s in zip(predictions, samples))
    assert "blind" in json.loads((tmp_path / "siq.meta.json").read_text())["asked"]["note"]


def test_bad_prompt_field_is_one_line_before_loading(cli, tiny, built, tmp_path):
    code, _, err = cli("predict", "disco", "--data", built("disco"), "--model", f"hf:{tiny['llava']}",
                       "--out", tmp_path / "p.json", "--prompt", "Count {people}")
    assert code == 2
    assert err.strip() == "error: --prompt: unknown field {people} for disco (fields: none)"
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "p.meta.json").exists()


def test_a_checkpoint_that_is_not_a_vlm_is_one_line(cli, tiny, built, tmp_path):
    from tiny_checkpoints import write_tiny_bert_mlm

    bert = write_tiny_bert_mlm(tmp_path / "bert")
    code, _, err = cli("predict", "socialiq", "--data", built("socialiq"), "--model", f"hf:{bert}",
                       "--out", tmp_path / "p.json")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "socialiq predictions come from" in err


def test_log_samples_needs_a_generative_model(cli, built, tmp_path):
    code, _, err = cli("predict", "socialiq", "--data", built("socialiq"), "--model", "baseline:majority",
                       "--out", tmp_path / "p.json", "--log-samples")
    assert code == 2 and "--log-samples" in err and len(err.strip().splitlines()) == 1


def test_a_benchmark_without_a_way_to_ask_is_one_line(tiny):
    from core.errors import ModelError
    from evaluator.socialiq.task import SocialIQTask

    class Unaskable(SocialIQTask):
        generative = None
        generative_reason = "its answers are audio"

    with pytest.raises(ModelError, match=r"cannot answer socialiq: its answers are audio"):
        Unaskable().make_model(f"hf:{tiny['llava']}", ModelOptions())


def _askable() -> list[str]:
    """The registered benchmarks a generative VLM can be asked (their Task declares an `Ask`)."""
    from evaluator.tasks import get_task, task_names

    return [name for name in task_names() if get_task(name).generative is not None]


@pytest.fixture(scope="module")
def vlm_run(tiny, built, tmp_path_factory):
    """vlm_run(bench): the tiny LLaVA's predictions, samples and split table on a benchmark, made once:
    every image key of the rows gets a small image (a path-like key as is, any other as <key>.png, which
    `--images` finds by stem)."""
    from core.data import load_table, pick_split
    from evaluator.run import predict
    from evaluator.tasks import get_task

    runs = {}

    def run(bench: str):
        if bench not in runs:
            task, data, root = get_task(bench), built(bench), tmp_path_factory.mktemp(f"vlm-{bench}")
            table = load_table(data, task.config, pick_split(data, task.config, None, task.default_split))
            images = write_row_images(bench, data, root / "img")
            out = root / "p.json"
            predict(bench, str(data), f"hf:{tiny['llava']}", out, log_samples=True,
                    options=ModelOptions(images=images, max_new_tokens=4))
            samples = [json.loads(line) for line in (root / "p.samples.jsonl").read_text().splitlines()]
            runs[bench] = (task, table, json.loads(out.read_text()), samples, root)
        return runs[bench]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("bench", _askable())
def test_every_askable_benchmark_end_to_end_with_a_tiny_vlm(bench, vlm_run, cli, built):
    """One prediction and one logged sample per row, the prediction file being the task's view of the
    samples' predictions; a generated answer is the Ask's reading of the output; the file scores."""
    task, table, predictions, samples, root = vlm_run(bench)
    assert len(predictions) == len(samples) == table.num_rows
    assert predictions == task.predictions_file(table, [s["prediction"] for s in samples])
    if task.generative.mode == "generate":
        assert all(s["prediction"] == (task.generative.combine([s["output"]]) or 0.0) for s in samples
                   if "output" in s)
    code, _, err = cli("evaluate", bench, "--data", built(bench), "--predictions", root / "p.json")
    assert code == 0, err


@pytest.mark.slow
@pytest.mark.parametrize("bench", ["gqa-ood", "vqa-v2"])
def test_a_generated_short_answer_is_cleaned_and_normalised(bench, vlm_run):
    """GQA: cleaned and lower-cased (its answers are written so); VQA: cleaned and put through the
    official normalisation. The cleaning is on the record."""
    from evaluator.vqa.metrics import normalize_prediction

    task, _, predictions, samples, root = vlm_run(bench)
    field = task.value_field
    normal = (lambda a: a.lower()) if bench == "gqa-ood" else normalize_prediction
    assert [p[field] for p in predictions] == [normal(clean_answer(s["output"])) for s in samples]
    assert task.generative.cleaning in (root / "p.meta.json").read_text()


@pytest.mark.slow
def test_vcr_asks_twice_per_item(vlm_run):
    """The answers given the question, then the rationales given the question and the correct answer."""
    _, table, predictions, samples, _ = vlm_run("vcr")
    assert [(p["answer_scores"], p["rationale_scores"]) for p in predictions] == [tuple(s["loglik"]) for s in samples]
    row = table.slice(0, 1).to_pylist()[0]
    assert samples[0]["continuations"] == [row["answer_choices"], row["rationale_choices"]]
    assert samples[0]["prompts"][1].count(f"{row['question']} {row['answer_choices'][row['answer_label']]}") == 1


@pytest.mark.slow
def test_cosim_default_prompt_puts_the_change_first(vlm_run):
    _, table, _, samples, _ = vlm_run("cosim-q")
    row = table.slice(0, 1).to_pylist()[0]
    assert samples[0]["prompt"] == f"Imagine this change to the scene: {row['change']}\n{row['question']}"


@pytest.mark.slow
def test_visdial_ranks_options_by_log_likelihood(vlm_run):
    """Ranks of the 100 options by log-likelihood (ties keep option order)."""
    from evaluator.visdial.metrics import scores_to_ranks

    _, _, predictions, samples, _ = vlm_run("visdial")
    assert [p["ranks"] for p in predictions] == scores_to_ranks(np.array([s["loglik"] for s in samples])).tolist()


@pytest.mark.slow
def test_perceptual_score_of_a_tiny_vlm(cli, tiny, built, sample_sources, tmp_path):
    report = tmp_path / "report"
    code, out, err = cli("perceptual", "vqa-v2", "--data", built("vqa-v2"), "--model", f"hf:{tiny['llava']}",
                         "--images", sample_sources / "coco", "--permutations", "1", "--repeats", "1",
                         "--max-new-tokens", "3", "--report", report)
    assert code == 0, err
    metrics = json.loads((report / "metrics.json").read_text())
    assert set(metrics["modalities"]) == {"image", "question"}
    assert metrics["modalities"]["image"] == ["image_id", "coco_split"]


@pytest.mark.slow
def test_two_gloo_processes_predict_what_one_does(tiny, built, tmp_path):
    """Rows sharded over two CPU processes (gloo), gathered by rank 0: the same prediction file, samples
    and metadata as one process."""
    from helpers import torchrun

    files = {}
    for processes in (1, 2):
        out = tmp_path / f"p{processes}.json"
        done = torchrun(["predict", "disco", "--data", built("disco"), "--model", f"hf:{tiny['llava']}", "--out", out,
                         "--max-new-tokens", 3, "--batch-size", 3, "--log-samples"], processes)
        assert done.returncode == 0, done.stderr[-3000:]
        meta = json.loads((tmp_path / f"p{processes}.meta.json").read_text())
        meta.pop("predictions")
        files[processes] = (out.read_text(), (tmp_path / f"p{processes}.samples.jsonl").read_text(), meta)
    assert files[1] == files[2]


@pytest.mark.parametrize("images", ["missing-folder", "missing-file"])
def test_bad_images_fail_before_any_weight_is_read(images, tiny, built, cli, tmp_path,
                                                   monkeypatch):
    """The adapter finds every image of the rows before it loads the model: TransformersVLM (which
    reads the weights) is never constructed when --images is missing or lacks a row's file."""
    from evaluator.models import transformers_vlm

    loaded = []
    real = transformers_vlm.TransformersVLM.__init__
    monkeypatch.setattr(transformers_vlm.TransformersVLM, "__init__",
                        lambda self, *a: loaded.append(a) or real(self, *a))
    folder = tmp_path / "images"
    if images == "missing-file":
        folder.mkdir()
        (folder / "n000001.jpg").write_bytes(b"not the row's image")
    code, _, err = cli("predict", "gqa-ood", "--data", built("gqa-ood"), "--model", f"hf:{tiny['llava']}", "--out",
                       tmp_path / "p.json", "--images", folder)
    needle = "no such folder" if images == "missing-folder" else "no image file for image"
    assert code == 2 and err.startswith("error: ") and needle in err and len(err.strip().splitlines()) == 1
    assert loaded == [] and not (tmp_path / "p.json").exists()


def test_duplicate_continuations_tie_whatever_their_row(tiny):
    """Equal options of one context get one score (scored once, shared), on both paths: the cached
    prefix (many options) and full sequences (few). The options are the ones bench_generative.py used
    to have (20 strings five times each): batched with the cached prefix on 2 threads, duplicates
    scored apart used to differ by 7.6e-6 (the bench's identical-ranks check failed on it)."""
    import torch

    words = "the red cup on a wooden table near window light".split()
    many = [" ".join(words[i % 5: i % 5 + 1 + i % 4]) for i in range(100)]
    few = ["yes", "no", "yes"]
    turn = Turn("Caption: a table by a window\nQuestion: what is on the table?", tuple(_images([(30, 40)])))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        vlm = TransformersVLM(str(tiny["llava"]), hf_config(str(tiny["llava"])), ModelOptions(batch_size=16))
        scores_many, scores_few = vlm.score([turn, turn], [many, few])
    finally:
        torch.set_num_threads(threads)
    by_text: dict[str, set] = {}
    for text, score in zip(many, scores_many):
        by_text.setdefault(text, set()).add(score)
    assert len(by_text) == 20 and all(len(v) == 1 for v in by_text.values())
    assert scores_few[0] == scores_few[2] != scores_few[1]


@pytest.mark.parametrize("overlap", [True, False])
def test_prefetched_batches_come_in_order(overlap):
    """Batches are prepared in a thread on an accelerator (overlap) and in turn on the CPU: either way
    each batch comes with its own preparation, in order."""
    from evaluator.models.transformers_vlm import _prefetched

    batches = [[1, 2], [3], [4, 5, 6]]
    assert list(_prefetched(batches, sum, overlap)) == [([1, 2], 3), ([3], 3), ([4, 5, 6], 15)]
    assert list(_prefetched([], sum, overlap)) == []
