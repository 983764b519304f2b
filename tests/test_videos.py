"""Video frames for generative models (evaluator/models/videos.py) and Social-IQ with `--videos DIR`: tiny
videos are written here with PyAV, each frame a flat grey of a known level, so the frames a model is
shown can be identified."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import LEVEL_STEP, write_video

from core.errors import ModelError
from evaluator.models.videos import VideoFolder, frame_indices, read_frames
from pipelines.build import run_build
from pipelines.tiny_models import write_tiny_llava

av = pytest.importorskip("av", reason="PyAV is part of the test extra (pip install -e '.[test]')")


def _levels(images) -> list[int]:
    return [int(round(np.asarray(im, dtype=np.float64).mean() / LEVEL_STEP)) for im in images]


@pytest.mark.parametrize("total, count, expected", [
    # Hand-computed: round(k * (total - 1) / (count - 1)) for k = 0..count-1.
    (10, 4, [0, 3, 6, 9]),
    (100, 8, [0, 14, 28, 42, 57, 71, 85, 99]),  # 99/7 = 14.142857...: 14.14, 28.29, 42.43, 56.57, 70.71, 84.86
    (3, 8, [0, 1, 2]),  # fewer frames than asked: every frame
    (9, 1, [4]),  # one frame: the middle one
    (8, 8, list(range(8))),
])
def test_frame_indices_spread_evenly_from_first_to_last(total, count, expected):
    assert frame_indices(total, count) == expected


@pytest.mark.parametrize("name, codec", [("clip.mp4", "mpeg4"), ("clip.mkv", "ffv1")])
def test_read_frames_decodes_the_evenly_spread_frames(tmp_path, name, codec):
    path = write_video(tmp_path / name, frames=10, codec=codec)
    frames = read_frames(path, 4)
    assert [im.mode for im in frames] == ["RGB"] * 4 and frames[0].size == (32, 32)
    assert _levels(frames) == [0, 3, 6, 9]  # frame_indices(10, 4)


def test_video_folder_finds_ids_in_sub_folders_and_names_what_is_missing(tmp_path):
    write_video(tmp_path / "videos" / "part1" / "abc_-1.mp4", frames=2)
    (tmp_path / "videos" / "notes.txt").write_text("not a video")
    folder = VideoFolder(tmp_path / "videos")
    assert folder.path("abc_-1") == tmp_path / "videos" / "part1" / "abc_-1.mp4"
    with pytest.raises(ModelError, match=r"no video file for video 'notes'"):
        folder.path("notes")
    with pytest.raises(ModelError, match=r"not a folder"):
        VideoFolder(tmp_path / "absent")


def test_a_damaged_video_is_one_error_naming_the_file(tmp_path):
    path = tmp_path / "broken.mp4"
    path.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 20)
    with pytest.raises(ModelError, match=r"broken\.mp4: cannot read video frames"):
        read_frames(path, 4)


@pytest.fixture(scope="module")
def socialiq(sample_sources, tmp_path_factory):
    """The built sample Social-IQ, a video per validation video (frame counts 6..9) and a tiny LLaVA."""
    root = tmp_path_factory.mktemp("socialiq-videos")
    run_build("socialiq", sample_sources, root / "built")
    folds = json.loads((sample_sources / "socialiq" / "socialiq_std_folds.json").read_text())
    frames = {video: 6 + k % 4 for k, video in enumerate(folds["standard_valid_fold"])}
    for video, count in frames.items():
        write_video(root / "videos" / f"{video}.mp4", frames=count)
    return {"built": root / "built", "videos": root / "videos", "frames": frames,
            "model": write_tiny_llava(root / "tiny-llava")}


@pytest.mark.slow
def test_socialiq_with_videos_end_to_end(cli, socialiq, tmp_path):
    """predict with frames, then evaluate: the report says what the model saw; the blind run differs."""
    seen, blind = tmp_path / "seen.json", tmp_path / "blind.json"
    code, _, err = cli("predict", "socialiq", "--data", socialiq["built"], "--model", f"hf:{socialiq['model']}",
                       "--out", seen, "--videos", socialiq["videos"], "--frames", "3", "--log-samples")
    assert code == 0, err
    samples = [json.loads(line) for line in (tmp_path / "seen.samples.jsonl").read_text().splitlines()]
    assert {s["frames"] for s in samples} == {3}
    meta = json.loads((tmp_path / "seen.meta.json").read_text())
    assert meta["asked"]["note"].startswith("video: 3 frames per video, spread evenly")
    assert meta["options"]["frames"] == 3
    code, _, err = cli("predict", "socialiq", "--data", socialiq["built"], "--model", f"hf:{socialiq['model']}",
                       "--out", blind)
    assert code == 0, err
    seen_scores = [p["score"] for p in json.loads(seen.read_text())]
    blind_scores = [p["score"] for p in json.loads(blind.read_text())]
    assert [p["id"] for p in json.loads(seen.read_text())] == [p["id"] for p in json.loads(blind.read_text())]
    assert np.max(np.abs(np.array(seen_scores) - np.array(blind_scores))) > 1e-3  # the frames reach the model

    for name, expected in (("seen", "- Note: video: 3 frames per video"), ("blind", "- Note: blind: the video")):
        report = tmp_path / f"report-{name}"
        code, stdout, err = cli("evaluate", "socialiq", "--data", socialiq["built"], "--predictions",
                                tmp_path / f"{name}.json", "--report", report)
        assert code == 0, err
        text = (report / "report.md").read_text()
        assert "## How the predictions were made" in text and expected in text
        assert "A2 is" in text  # the log-likelihood caveat stays with either
        metrics = json.loads((report / "metrics.json").read_text())
        assert metrics["prediction_record"]["model"] == f"hf:{socialiq['model']}"


def test_frames_of_one_video_are_decoded_once_and_shown_in_order(socialiq, monkeypatch):
    """Rows are asked video by video; every row of a video gets the same frames, in frame order."""
    import evaluator.models.ask as ask_module
    from evaluator.models.ask import GenerativeAdapter
    from evaluator.models.options import ModelOptions
    from evaluator.socialiq.task import SocialIQTask

    decoded, shown = [], []
    real = ask_module.read_frames
    monkeypatch.setattr(ask_module, "read_frames", lambda path, n: decoded.append(path.stem) or real(path, n))

    class RecordingVLM:
        def score(self, turns, continuations, names=None):
            shown.extend(_levels(t.images) for t in turns)
            return [[-float(len(c[0]))] for c in continuations]

    from core.data import load_table

    table = load_table(socialiq["built"], "answers", "validation")
    options = ModelOptions(videos=socialiq["videos"], frames=4)
    adapter = GenerativeAdapter(RecordingVLM, SocialIQTask.generative, "{question}", options,
                                VideoFolder(socialiq["videos"]))
    predictions = adapter.predict(table)
    videos = table.column("video_id").to_pylist()
    assert sorted(decoded) == sorted(set(videos))  # once per video
    assert predictions == [-float(len(a)) for a in table.column("answer").to_pylist()]  # back in row order
    in_order = list(dict.fromkeys(videos))  # videos are asked in order of first appearance
    assert shown == [frame_indices(socialiq["frames"][v], 4) for v in in_order for _ in range(videos.count(v))]
    assert adapter.input_columns == ("question", "answer", "video_id")


def test_videos_where_a_benchmark_has_none_or_a_model_reads_none_is_one_line(cli, socialiq, tmp_path):
    code, _, err = cli("predict", "socialiq", "--data", socialiq["built"], "--model", "baseline:majority",
                       "--out", tmp_path / "p.json", "--videos", socialiq["videos"])
    assert code == 2 and err.strip() == "error: --videos: baseline:majority does not read it (it applies to " \
                                        "generative hf:, vllm: and openai: models)"
    code, _, err = cli("predict", "socialiq", "--data", socialiq["built"], "--model", f"hf:{socialiq['model']}",
                       "--out", tmp_path / "p.json", "--videos", tmp_path / "absent")
    assert code == 2 and err.strip() == f"error: --videos {tmp_path / 'absent'}: not a folder"
    assert not (tmp_path / "p.json").exists()
    from evaluator.models.options import ModelOptions
    from evaluator.tasks import get_task

    with pytest.raises(ModelError, match=r"^--videos: disco rows have no videos to show a model$"):
        get_task("disco").make_model(f"hf:{socialiq['model']}", ModelOptions(videos=socialiq["videos"]))
