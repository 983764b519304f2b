"""DISCO: counting metrics by hand, .mat/.wav/.jpg readers (files written by scipy/soundfile/PIL),
low-quality images, build + load + scoring end to end, bad input."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from builders.disco import reader as disco
from builders.disco.builder import degrade
from builders.disco.samples import write_disco
from core.errors import SourceError
from evaluator.disco.metrics import counting_metrics


def test_counting_metrics_by_hand():
    """p = (10, 20, 0, 3), t = (8, 25, 4, 0): AE 2, 5, 4, 3 -> MAE 3.5; SE 4, 25, 16, 9 -> RMSE sqrt(13.5);
    APE 0.25, 0.2, 1.0 (t = 0 has none) -> MAPE 0.48333, 1 - MAPE 0.51667."""
    m = counting_metrics(np.array([10, 20, 0, 3]), np.array([8, 25, 4, 0]))
    assert m["mae"] == 3.5 and m["rmse"] == pytest.approx(math.sqrt(13.5))
    assert m["mape"] == pytest.approx(1.45 / 3) and m["one_minus_mape"] == pytest.approx(1 - 1.45 / 3)
    assert m["zero_count_samples"] == 1


def test_density_map_count_and_errors(tmp_path):
    from scipy.io import savemat

    density = np.zeros((6, 8))
    density[1, 2], density[4, 5], density[3, 3] = 0.25, 0.75, 2.0
    savemat(tmp_path / "a.mat", {"map": density})
    count, shape = disco.read_count(tmp_path / "a.mat")
    assert count == pytest.approx(3.0) and shape == (6, 8)
    savemat(tmp_path / "b.mat", {"density": density})
    with pytest.raises(SourceError, match="b.mat: field 'map': no density map"):
        disco.read_count(tmp_path / "b.mat")
    savemat(tmp_path / "c.mat", {"map": -density})
    with pytest.raises(SourceError, match="non-negative"):
        disco.read_count(tmp_path / "c.mat")
    (tmp_path / "d.mat").write_bytes(b"not matlab")
    with pytest.raises(SourceError, match="d.mat: not a readable MATLAB file"):
        disco.read_count(tmp_path / "d.mat")


def test_low_quality_is_darker_noisier_and_deterministic(tmp_path):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 150, 100)).save(buf, format="JPEG")
    low = degrade(buf.getvalue(), 0.3, 25.0, seed=3)
    assert low == degrade(buf.getvalue(), 0.3, 25.0, seed=3)
    assert low != degrade(buf.getvalue(), 0.3, 25.0, seed=4)
    pixels = np.asarray(Image.open(io.BytesIO(low)), dtype=float)
    assert abs(pixels[..., 0].mean() - 0.3 * 200) < 5 and pixels.std() > 10


@pytest.fixture
def source(tmp_path):
    write_disco(tmp_path / "src", {"train": 4, "test": 3}, seed=2)
    return tmp_path / "src"


def test_build_load_and_score(cli, source, tmp_path):
    import soundfile
    from datasets import load_dataset

    out = tmp_path / "disco"
    assert cli("build", "disco", "--source", source, "--out", out)[0] == 0
    ds = load_dataset(str(out), "default", split="test")
    assert len(ds) == 6 and sorted(set(ds["quality"])) == ["high", "low"]
    row = ds[0]
    assert row["image"].size == (64, 48)
    audio, rate = soundfile.read(io.BytesIO(row["audio"]["bytes"]))
    assert rate == 8000 and len(audio) == 8000
    count, _ = disco.read_count(source / "density" / "test" / f"{row['image_id']}.mat")
    assert row["count"] == count
    perfect = [{"id": r["id"], "count": r["count"]} for r in ds.select_columns(["id", "count"])]
    sub = tmp_path / "sub.json"
    sub.write_text(json.dumps(perfect))
    assert cli("evaluate", "disco", "--data", out, "--predictions", sub, "--report", tmp_path / "rep")[0] == 0
    metrics = json.loads((tmp_path / "rep" / "metrics.json").read_text())
    assert metrics["mae"] == 0.0 and metrics["one_minus_mape"] == 1.0
    assert set(metrics["by_quality"]) == {"high", "low"} and metrics["by_quality"]["low"]["mae"] == 0.0
    doubled = [{"id": p["id"], "count": 2 * p["count"]} for p in perfect]
    sub.write_text(json.dumps(doubled))
    metrics = json.loads(cli("evaluate", "disco", "--data", out, "--predictions", sub)[1])
    assert metrics["mape"] == pytest.approx(1.0) and metrics["one_minus_mape"] == pytest.approx(0.0, abs=1e-6)


def test_missing_audio_is_one_error_and_no_output(cli, source, tmp_path):
    victim = sorted((source / "auds").glob("*.wav"))[1]
    victim.unlink()
    code, _, err = cli("build", "disco", "--source", source, "--out", tmp_path / "out")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert victim.name in err and "audio clip" in err and not (tmp_path / "out").exists()


def test_unreadable_audio(cli, source, tmp_path):
    victim = sorted((source / "auds").glob("*.wav"))[0]
    victim.write_bytes(b"RIFF....garbage")
    code, _, err = cli("build", "disco", "--source", source, "--out", tmp_path / "out")
    assert code == 2 and victim.name in err and "not a readable audio file" in err
