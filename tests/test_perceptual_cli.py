"""`vlbench perceptual` end to end on the built samples: tiny random ViLT and CLIP, the feature-level
head, the encoder cache, bf16, two gloo processes, the report, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import torchrun

from pipelines.tiny_models import write_tiny_clip, write_tiny_vilt_vqa


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    answers = ["yes", "no", "2", "1", "3", "white", "red", "blue", "dog", "kitchen", "tennis", "pizza"]
    return {"vilt": write_tiny_vilt_vqa(root / "vilt", answers), "clip": write_tiny_clip(root / "clip")}


def _metrics(report: Path) -> dict:
    return json.loads((report / "metrics.json").read_text())


def _same_per_sample(a: Path, b: Path) -> bool:
    """Equal per-sample files, NaN (rows a metric does not score) equal to NaN."""
    first, second = (pq.read_table(folder / "per_sample.parquet").to_pandas() for folder in (a, b))
    return first.equals(second)


@pytest.mark.slow
def test_tiny_vilt_end_to_end_with_report(cli, built, models, sample_sources, tmp_path):
    report = tmp_path / "vilt"
    code, out, err = cli("perceptual", "vqa-v2", "--data", built("vqa-v2"), "--model", f"hf:{models['vilt']}",
                         "--images", sample_sources / "coco", "--permutations", 2, "--repeats", 2,
                         "--by", "answer_type", "--report", report)
    assert code == 0, err
    assert "image" in out and "question" in out
    metrics = _metrics(report)
    assert metrics["rows"] == 400 and list(metrics["modalities"]) == ["image", "question"]
    assert set(metrics["by"]["groups"]) == {"number", "other", "yes/no"}
    s = metrics["all"]["vqa_accuracy"]
    assert s["z_df"] == s["acc"] and s["z_d"] == pytest.approx(100 - s["acc_majority"])
    image = s["modalities"]["image"]
    assert image["p"]["mean"] == pytest.approx(s["acc"] - image["acc_without"]["mean"])
    md = (report / "report.md").read_text()
    assert "| Subset | Acc_M | Acc_M\\{image} | P_image | P_image/Z_D | P_image/Z_D,f |" in md
    assert "## Yes/no answers by question start token (Table 2)" in md and "| 'do' |" in md
    assert (report / "perceptual_scores.png").stat().st_size > 0
    per_sample = pq.read_table(report / "per_sample.parquet")
    assert per_sample.num_rows == 400 and "answer_type" in per_sample.column_names
    assert 100 * np.mean(per_sample.column("vqa_accuracy_P_image").to_numpy()) == pytest.approx(image["p"]["mean"])


@pytest.mark.slow
def test_bf16_and_dataloader_workers(cli, built, models, sample_sources, tmp_path):
    """bf16 autocast runs; images decoded by a DataLoader worker give the same answers as in-process."""
    runs = {}
    for name, flags in (("plain", []), ("workers", ["--workers", 1]), ("bf16", ["--bf16"])):
        code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--model", f"hf:{models['vilt']}",
                           "--images", sample_sources / "coco", "--batch-size", 64, "--out", tmp_path / f"{name}.json",
                           *flags)
        assert code == 0, err
        runs[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert runs["workers"] == runs["plain"]
    assert len(runs["bf16"]) == len(runs["plain"]) == 400
    agree = np.mean([a["answer"] == b["answer"] for a, b in zip(runs["bf16"], runs["plain"])])
    assert agree > 0.5  # bf16 rounding may flip near-tied random logits, not most answers


@pytest.mark.slow
def test_clip_encoder_cache_gives_identical_scores(cli, built, models, sample_sources, tmp_path):
    """The late-fusion CLIP scorer: permuting cached embeddings equals re-encoding permuted inputs."""
    runs = {}
    for name, flags in (("cached", []), ("plain", ["--no-encoder-cache"])):
        code, _, err = cli("perceptual", "vqa-cp", "--data", built("vqa-cp"), "--model", f"hf:{models['clip']}",
                           "--images", sample_sources / "coco", "--permutations", 1, "--repeats", 1,
                           "--report", tmp_path / name, *flags)
        assert code == 0, err
        runs[name] = _metrics(tmp_path / name)
    assert runs["cached"]["all"] == runs["plain"]["all"]
    assert _same_per_sample(tmp_path / "cached", tmp_path / "plain")


def _write_features(path: Path, keys: list[str], vectors: list[list[float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"key": keys, "features": pa.array(vectors, pa.list_(pa.float32()))}), path)


def test_feature_head_reads_only_its_feature_files(cli, built, tmp_path):
    """Social-IQ with answer features only (VADER polarity and noise): the head learns the sentiment
    bias, and the video and question scores are exactly 0 because it never reads them."""
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    from core.data import load_table

    analyzer = SentimentIntensityAnalyzer()
    answers = sorted({a for split in ("train", "validation")
                      for a in load_table(built("socialiq"), "answers", split).column("answer").to_pylist()})
    rng = np.random.default_rng(0)
    _write_features(tmp_path / "feats" / "answer.parquet", answers,
                    [[analyzer.polarity_scores(a)["compound"], float(rng.normal())] for a in answers])
    code, out, err = cli("perceptual", "socialiq", "--data", built("socialiq"), "--model",
                         f"features:{tmp_path / 'feats'}", "--report", tmp_path / "r")
    assert code == 0, err
    s = _metrics(tmp_path / "r")["all"]["accuracy"]
    assert s["acc"] > s["acc_majority"]  # better than calling every answer correct (57.14 %)
    assert s["modalities"]["video"]["p"] == {"mean": 0.0, "std": 0.0}
    assert s["modalities"]["question"]["p"] == {"mean": 0.0, "std": 0.0}
    assert s["modalities"]["answer"]["p"]["mean"] > 5


def test_feature_head_regression_on_disco(cli, built, tmp_path):
    """DISCO image features that carry the count: a least-squares head counts well from the image and
    ignores the (noise) audio features; the decomposition by quality gives Table 5's rows."""
    from core.data import load_table

    rows = [load_table(built("disco"), "default", s) for s in ("train", "val", "test")]
    ids = [i for t in rows for i in t.column("id").to_pylist()]
    counts = [c for t in rows for c in t.column("count").to_pylist()]
    rng = np.random.default_rng(1)
    _write_features(tmp_path / "f" / "image.parquet", ids, [[c + float(rng.normal(0, 0.5))] for c in counts])
    image_ids = sorted({i for t in rows for i in t.column("image_id").to_pylist()})
    _write_features(tmp_path / "f" / "audio.parquet", image_ids, [[float(rng.normal())] for _ in image_ids])
    code, _, err = cli("perceptual", "disco", "--data", built("disco"), "--model", f"features:{tmp_path / 'f'}",
                       "--by", "quality", "--report", tmp_path / "r")
    assert code == 0, err
    metrics = _metrics(tmp_path / "r")
    s = metrics["all"]["one_minus_mape"]
    assert s["acc"] > 80 and s["modalities"]["image"]["p"]["mean"] > 20
    assert set(metrics["by"]["groups"]) == {"high", "low"}
    assert "| Subset | 1 - MAPE_M |" in (tmp_path / "r" / "report.md").read_text()


def test_bad_input_is_one_line_exit_2(cli, built, tmp_path):
    data = built("socialiq")
    cases = [
        (("socialiq", "--modalities", "audio"), "--modalities audio: socialiq has modalities video, question, answer"),
        (("vl-bias",), "measure a model's social bias with `vlbench counterbias"),
        (("socialiq", "--model", "py:perceptual_models:reads_missing_column"), "reads column 'transcript'"),
        (("socialiq", "--where", "video_id=nothing"), "no rows to score where video_id=nothing"),
        (("socialiq", "--by", "answer_mood"), "--by answer_mood: no such column"),
        (("socialiq", "--sampling", "bootstrap"),
         "Invalid value for '--sampling': 'bootstrap' is not one of 'uniform', 'permutation'"),
        (("socialiq", "--model", f"features:{tmp_path}"), "no feature file"),
    ]
    for args, needle in cases:
        model = [] if "--model" in args else ["--model", "baseline:answer-sentiment"]
        code, out, err = cli("perceptual", args[0], "--data", data, *model, *args[1:])
        assert code == 2, (args, err)
        assert needle in err and len(err.strip().splitlines()) == 1, (args, err)


def test_features_missing_a_key_names_file_and_key(cli, built, tmp_path):
    _write_features(tmp_path / "f" / "answer.parquet", ["only this answer"], [[1.0]])
    code, _, err = cli("perceptual", "socialiq", "--data", built("socialiq"), "--model", f"features:{tmp_path / 'f'}")
    assert code == 2 and "answer.parquet: no features for answer '" in err


@pytest.mark.slow
def test_two_gloo_processes_give_the_numbers_of_one(built, models, sample_sources, tmp_path):
    """Rows sharded over two CPU processes (gloo) and merged: the same metrics and per-sample scores
    as a single-process run, for a fitted baseline, a random ranking (seeded per row, gathered as
    100 ranks per row) and the tiny ViLT."""
    for name, bench, extra in (("prior", "vqa-cp", ["--model", "baseline:prior", "--by", "answer_type"]),
                               ("random", "visdial", ["--model", "baseline:random"]),
                               ("vilt", "vqa-v2", ["--model", f"hf:{models['vilt']}", "--images",
                                                   sample_sources / "coco", "--batch-size", 16])):
        runs = {}
        for processes in (1, 2):
            report = tmp_path / f"{name}-{processes}"
            done = torchrun(["perceptual", bench, "--data", built(bench), "--permutations", 2, "--repeats", 2,
                              "--report", report, *extra], processes)
            assert done.returncode == 0, done.stderr[-3000:]
            runs[processes] = _metrics(report)
        assert runs[2]["world_size"] == 2 and runs[1]["world_size"] == 1
        for key in ("all", "by", "token_analysis"):
            assert runs[1].get(key) == runs[2].get(key), key
        assert _same_per_sample(tmp_path / f"{name}-1", tmp_path / f"{name}-2")
