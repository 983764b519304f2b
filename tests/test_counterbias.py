"""CounterBias end to end with tiny random masked LMs (Zhang, Wang, Sang, ACM MM 2022, §3): the adapter against a manual
forward pass, the PGD attack (Eq. 3) and its budget, the cache, the CLI report, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from helpers import assert_one_error_line, counterbias_reports, disk_full_at, tiny_vl_bias
from tiny_checkpoints import write_tiny_bert_mlm

from evaluator.models.options import ModelOptions
from evaluator.vl_bias import counterbias as cb
from evaluator.vl_bias.attack import PGD, pgd_attack
from evaluator.vl_bias.families import load_probe
from evaluator.vl_bias.probe import pad_images
from pipelines.tiny_models import write_tiny_vilt_mlm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("counterbias")
    return {**tiny_vl_bias(root), "vilt": write_tiny_vilt_mlm(root / "vilt"),
            "bert": write_tiny_bert_mlm(root / "bert")}


def _images(src: Path, n: int):
    from PIL import Image

    return [Image.open(p).convert("RGB") for p in sorted(src.rglob("*.jpg"))[:n]]


def test_vilt_probabilities_at_the_mask_equal_a_manual_forward_pass(tiny):
    from transformers import AutoImageProcessor, AutoTokenizer, ViltForMaskedLM

    model = load_probe(f"hf:{tiny['vilt']}", ModelOptions(batch_size=3))
    images = _images(tiny["src"], 3)
    images[1] = images[1].resize((40, 64))  # another size: the batch is padded
    texts = ["The man is [MASK]", "A photo of a girl who is [MASK]", "A [MASK] is in the picture"]
    words = ["cooking", "nurse", "woman"]
    ids = [model.word_ids([w])[w][0] for w in words]
    got = np.exp(model.log_probs([(t, model.image_tensor(im)) for t, im in zip(texts, images)], ids))
    # score() gives each query its own candidates' values, from the same pass
    own = model.score([(t, model.image_tensor(im)) for t, im in zip(texts, images)], [(w,) for w in words])
    np.testing.assert_allclose(np.exp([o[0] for o in own]), got.diagonal(), rtol=1e-5)

    tok, proc = AutoTokenizer.from_pretrained(tiny["vilt"]), AutoImageProcessor.from_pretrained(tiny["vilt"])
    vilt = ViltForMaskedLM.from_pretrained(tiny["vilt"]).eval()
    for k, (text, image) in enumerate(zip(texts, images)):
        enc = tok(text, return_tensors="pt")
        pix = proc(images=[image], return_tensors="pt")
        with torch.no_grad():
            logits = vilt(**enc, **pix).logits[0]
        pos = enc["input_ids"][0].tolist().index(tok.mask_token_id)
        expected = torch.softmax(logits[pos], dim=-1)[ids].numpy()
        np.testing.assert_allclose(got[k], expected, rtol=1e-4, atol=1e-7)
    assert tok.convert_ids_to_tokens(ids) == words  # the small local vocabulary has each word as one token


def test_text_only_adapter_equals_a_manual_forward_pass(tiny):
    from transformers import AutoTokenizer, BertForMaskedLM

    model = load_probe(f"hf:{tiny['bert']}", ModelOptions())
    assert not model.vision
    ids = [model.word_ids(["shopping"])["shopping"][0]]
    got = np.exp(model.log_probs([("The woman is [MASK]", None), ("A boy who is [MASK]", None)], ids))[:, 0]
    tok = AutoTokenizer.from_pretrained(tiny["bert"])
    bert = BertForMaskedLM.from_pretrained(tiny["bert"]).eval()
    for k, text in enumerate(["The woman is [MASK]", "A boy who is [MASK]"]):
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            probs = torch.softmax(bert(**enc).logits[0, enc["input_ids"][0].tolist().index(tok.mask_token_id)], -1)
        assert got[k] == pytest.approx(probs[ids[0]].item(), rel=1e-5)


def test_pgd_raises_the_counterfactual_word_inside_the_ball(tiny):
    model = load_probe(f"hf:{tiny['vilt']}", ModelOptions())
    images = _images(tiny["src"], 12)
    images[0] = images[0].resize((64, 40))
    xs = [model.image_tensor(im) for im in images]
    pixels, mask = pad_images(xs)
    objective = model.attack_objective(pixels, mask, "A [MASK] is in the picture", ("man", "woman"))
    target = [1] * 6 + [0] * 6  # B' = woman for the first six, man for the others
    attack = PGD(eps=4 / 255, steps=5)
    adv = pgd_attack(objective, pixels, mask, target, attack)
    with torch.no_grad():
        before = objective(pixels).exp()
        after = objective(adv).exp()
    rows = torch.arange(len(xs))
    raised = (after[rows, target] > before[rows, target]).float().mean().item()
    assert raised >= 0.75, raised
    delta = adv - pixels
    assert delta.abs().max().item() <= attack.eps + 1e-6  # never leaves the L-inf ball
    assert adv.min().item() >= 0.0 and adv.max().item() <= 1.0
    assert (delta * (1 - mask.unsqueeze(1))).abs().max().item() == 0.0  # padding untouched
    assert delta.abs().max().item() > attack.eps / 2  # it did move


def test_pgd_batched_equals_one_image_at_a_time(tiny):
    model = load_probe(f"hf:{tiny['vilt']}", ModelOptions())
    xs = [model.image_tensor(im) for im in _images(tiny["src"], 4)]
    attack = PGD(eps=4 / 255, steps=3)

    def run(batch):
        pixels, mask = pad_images(batch)
        objective = model.attack_objective(pixels, mask, "A [MASK] is in the picture", ("man", "woman"))
        return pgd_attack(objective, pixels, mask, [1] * len(batch), attack)

    together = run(xs)
    for i, x in enumerate(xs):
        alone = run([x])[0]
        assert (alone - together[i]).abs().max().item() < 1e-5 or \
            (alone != together[i]).float().mean().item() < 1e-3  # sign flips of gradients at float noise only


@pytest.mark.slow
def test_cli_report_table2_and_per_instance_values(cli, tiny, tmp_path):
    code, out, err = cli("counterbias", "--data", tiny["data"], "--model", f"hf:{tiny['vilt']}", "--eps", "0.02",
                         "--steps", "4", "--report", tmp_path / "r", "--batch-size", "8")
    assert code == 0, err
    assert "B@V-L (Eq. 6)" in out and "B@L (log, no image) (Eq. 13)" in out
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["settings"]["attack"] == {"eps": 0.02, "steps": 4, "step_size": pytest.approx(0.0125)}
    assert metrics["attack"]["max_linf"] <= 0.02 + 1e-6 and metrics["attack"]["raised_b_prime"] > 0.75
    report = (tmp_path / "r" / "report.md").read_text()
    assert "| Template | Activity B@V-L | Activity B@V | Activity B@L | Occupation B@V-L |" in report
    for label in ("| S_W/O |", "| S_W/ |", "| P_W/O |", "| P_W/ |", "| Avg. |"):
        assert label in report
    iv = metrics["intervals"]  # the Table 2 cells, bootstrapped over images
    assert iv["unit"] == "image" and iv["clusters"] == metrics["images"]
    assert {"measures.vl.avg.activity", "measures.l_log.avg.occupation"} <= set(iv["metrics"])
    assert "## 95% confidence intervals" in report
    for name in ("bias_per_target_activity.png", "bias_per_target_occupation.png", "bv_vs_bl.png", "instances.png"):
        assert (tmp_path / "r" / name).stat().st_size > 1000
    rows = pq.read_table(tmp_path / "r" / "per_instance.parquet").to_pandas()
    assert len(rows) == 10 * 4 * 4
    # Eq. 6, 9, 11, 13 recomputed from the stored probabilities; Eq. 7 and the Table 2 cells from those
    np.testing.assert_allclose(rows.bias_vl, cb.bias_vl(rows.p_t_vf_lf, rows.p_t_vcf_lcf, rows.p_b_vf, rows.p_b_vcf))
    np.testing.assert_allclose(rows.bias_v, cb.bias_v(rows.p_t_vf_lf, rows.p_t_vcf_lf, rows.p_b_vf, rows.p_b_vcf))
    np.testing.assert_allclose(rows.bias_l, -(rows.p_t_vf_lcf - rows.p_t_vf_lf))
    np.testing.assert_allclose(rows.bias_l_log, -(np.log(rows.p_t_lcf) - np.log(rows.p_t_lf)))
    sel = rows[(rows.template == "sentence") & (rows.target == "cooking")]
    signed = np.where(sel.bias_class == "male", 1, -1) * sel.bias_vl
    cell = metrics["measures"]["vl"]["templates"]["sentence"]["activity"]
    assert cell["per_target"]["cooking"]["bias"] == pytest.approx(signed.mean())
    assert cell["mean_abs"] == pytest.approx(np.mean([abs(v["bias"]) for v in cell["per_target"].values()]))

    # B0 = female flips every signed bias and leaves the Table 2 cells as they are
    code, _, err = cli("counterbias", "--data", tiny["data"], "--model", f"hf:{tiny['vilt']}", "--eps", "0.02",
                       "--steps", "4", "--b0", "female", "--report", tmp_path / "f", "--batch-size", "8")
    assert code == 0, err
    flipped = json.loads((tmp_path / "f" / "metrics.json").read_text())["measures"]["vl"]
    for target, value in metrics["measures"]["vl"]["per_target_avg"]["activity"].items():
        assert flipped["per_target_avg"]["activity"][target] == pytest.approx(-value)
    assert flipped["avg"] == pytest.approx(metrics["measures"]["vl"]["avg"])


def test_cache_reuses_counterfactuals_and_keys_on_attack_params(tiny, tmp_path):
    from evaluator.vl_bias.run import CounterBiasOptions, run_counterbias

    opts = lambda eps: CounterBiasOptions(attack=PGD(eps=eps, steps=2), cache=tmp_path / "cache")  # noqa: E731
    first = run_counterbias(str(tiny["data"]), f"hf:{tiny['vilt']}", opts(0.01), ModelOptions())
    files = sorted((tmp_path / "cache").rglob("*.npy"))
    assert len(files) == 40
    stamps = [f.stat().st_mtime_ns for f in files]
    again = run_counterbias(str(tiny["data"]), f"hf:{tiny['vilt']}", opts(0.01), ModelOptions())
    assert [f.stat().st_mtime_ns for f in files] == stamps and again["measures"] == first["measures"]
    run_counterbias(str(tiny["data"]), f"hf:{tiny['vilt']}", opts(0.02), ModelOptions())
    assert len(list((tmp_path / "cache").rglob("*.npy"))) == 80


def test_text_only_model_and_restricted_softmax(cli, tiny, tmp_path):
    code, out, err = cli("counterbias", "--data", tiny["data"], "--model", f"hf:{tiny['bert']}",
                         "--report", tmp_path / "b")
    assert code == 0, err
    metrics = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert list(metrics["measures"]) == ["l_log"] and metrics["attack"] is None
    assert "Table 3 layout" in (tmp_path / "b" / "report.md").read_text()
    code, _, err = cli("counterbias", "--data", tiny["data"], "--model", f"hf:{tiny['bert']}", "--softmax", "targets",
                       "--report", tmp_path / "t")
    assert code == 0, err
    full = pq.read_table(tmp_path / "b" / "per_instance.parquet").to_pandas()
    restricted = pq.read_table(tmp_path / "t" / "per_instance.parquet").to_pandas()
    assert (restricted.p_t_lf > full.p_t_lf).all()  # renormalised over 52 / 13 words instead of the vocabulary
    model = load_probe(f"hf:{tiny['bert']}", ModelOptions())
    from builders.vl_bias.words import OCCUPATIONS

    ids = [model.word_ids([w])[w][0] for w in OCCUPATIONS]
    logp = model.log_probs([("The man is [MASK]", None)], ids)[0]
    expected = np.exp(logp) / np.exp(logp).sum()
    row = restricted[(restricted.target == "nurse") & (restricted.bias_word == "man")
                     & (restricted.template == "sentence")]
    assert row.p_t_lf.iloc[0] == pytest.approx(expected[OCCUPATIONS.index("nurse")], rel=1e-5)


def test_bad_input_is_one_line_exit_2(cli, tiny, tmp_path):
    import pyarrow as pa

    shard = tiny["data"] / "default" / "test-00000-of-00001.parquet"
    t = pq.read_table(shard)
    images = t.column("image").to_pylist()
    bad = t.column("image_id")[5].as_py()
    images = [{"bytes": b"not an image", "path": im["path"]} if i == bad else im
              for im, i in zip(images, t.column("image_id").to_pylist())]
    broken = tmp_path / "broken"
    (broken / "default").mkdir(parents=True)
    pq.write_table(t.set_column(t.column_names.index("image"), "image", pa.array(images, t.schema.field("image").type)),
                   broken / "default" / shard.name)
    vilt = f"hf:{tiny['vilt']}"
    cases = [(("--data", tiny["data"], "--model", vilt, "--eps", "0"), "--eps 0.0: the L-infinity budget"),
             (("--data", tiny["data"], "--model", vilt, "--eps", "-0.1"), "--eps -0.1"),
             (("--data", broken, "--model", vilt, "--no-cache"), f"image '{bad}': cannot decode image"),
             (("--data", tiny["data"], "--model", vilt, "--softmax", "verbs"),
              "Invalid value for '--softmax': 'verbs' is not one of 'full', 'targets'"),
             (("--data", tiny["data"], "--model", "baseline:random"), "CounterBias measures hf:"),
             (("--data", tiny["data"], "--model", vilt, "--attack", "fgsm"),
              "Invalid value for '--attack': 'fgsm' is not one of 'pgd', 'none'")]
    for args, needle in cases:
        code, out, err = cli("counterbias", *args)
        assert code == 2, (args, err)
        assert needle in err and len(err.strip().splitlines()) == 1, (args, err)


def test_attack_none_reports_the_language_measures_only(cli, tiny, tmp_path):
    code, out, err = cli("counterbias", "--data", tiny["data"], "--model", f"hf:{tiny['vilt']}", "--attack", "none",
                         "--report", tmp_path / "n")
    assert code == 0, err
    metrics = json.loads((tmp_path / "n" / "metrics.json").read_text())
    assert list(metrics["measures"]) == ["l", "l_log"] and metrics["attack"] is None
    assert "B@L (%)" in (tmp_path / "n" / "report.md").read_text() and "B@V-L" not in out


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_report_of_another_model_never_mixes_with_the_one_it_replaces(cli, tiny, tmp_path, monkeypatch):
    """Model B's report into model A's folder: a full disk midway leaves A's report as it was (every byte)
    and nothing staged; a folder holding B's metrics beside A's per-instance rows (what a kill between the
    renames would leave) is refused by counterbias-compare, naming the file; B's whole report replaces A's."""
    args = ("--data", tiny["data"], "--attack", "none", "--bootstrap", "0", "--report")
    code, _, err = cli("counterbias", "--model", f"hf:{tiny['vilt']}", *args, tmp_path / "a")
    assert code == 0, err
    before = _files(tmp_path / "a")
    assert ".vlbench-report.json" in before and "per_instance.parquet" in before
    disk_full_at(monkeypatch, 3)
    code, _, err = cli("counterbias", "--model", f"hf:{tiny['bert']}", *args, tmp_path / "a")
    monkeypatch.undo()
    assert_one_error_line(code, err, ("--report", "No space left on device"))
    assert _files(tmp_path / "a") == before  # nothing of B, no staged file left
    code, _, err = cli("counterbias", "--model", f"hf:{tiny['bert']}", *args, tmp_path / "b")
    assert code == 0, err
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name, data in {**before, "metrics.json": (tmp_path / "b" / "metrics.json").read_bytes()}.items():
        (mixed / name).write_bytes(data)
    code, _, err = cli("counterbias-compare", tmp_path / "a", mixed)
    assert_one_error_line(code, err, (f"{mixed / 'metrics.json'}: not the file .vlbench-report.json lists",))
    code, _, err = cli("counterbias", "--model", f"hf:{tiny['bert']}", *args, tmp_path / "a")
    assert code == 0, err
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    code, _, err = cli("counterbias-compare", tmp_path / "a", tmp_path / "b", "--bootstrap", "0")
    assert code == 0, err


_PY_MODEL: dict = {}


def tiny_text_model():
    """`py:test_counterbias:tiny_text_model`: a library caller's own adapter object."""
    return load_probe(f"hf:{_PY_MODEL['path']}", ModelOptions())


def not_a_masked_lm():
    return object()


def test_py_spec_gives_an_adapter_object(cli, tiny, tmp_path):
    _PY_MODEL["path"] = tiny["bert"]
    code, _, err = cli("counterbias", "--data", tiny["data"], "--model", "py:test_counterbias:tiny_text_model",
                       "--report", tmp_path / "p")
    assert code == 0, err
    via_py = pq.read_table(tmp_path / "p" / "per_instance.parquet").column("bias_l_log").to_pylist()
    code, _, err = cli("counterbias", "--data", tiny["data"], "--model", f"hf:{tiny['bert']}",
                       "--report", tmp_path / "h")
    assert via_py == pq.read_table(tmp_path / "h" / "per_instance.parquet").column("bias_l_log").to_pylist()
    code, _, err = cli("counterbias", "--data", tiny["data"], "--model", "py:test_counterbias:not_a_masked_lm")
    assert code == 2 and "has no score(queries, candidates) method" in err and len(err.strip().splitlines()) == 1


def test_report_examples_need_no_second_attack(tiny, tmp_path, monkeypatch):
    """Without a cache every image is attacked once, report included: the run hands the Fig. 6
    examples (largest |Eq. 6| bias of the first template, half per gender class) to the report."""
    import evaluator.vl_bias.run as run

    attacked = []
    real = run.pgd_attack

    def counting(forward, pixels, *args, **kwargs):
        attacked.append(pixels.shape[0])
        return real(forward, pixels, *args, **kwargs)

    monkeypatch.setattr(run, "pgd_attack", counting)
    options = run.CounterBiasOptions(attack=PGD(0.01, 2), cache=None, chunk_images=7)
    metrics = run.run_counterbias(str(tiny["data"]), f"hf:{tiny['vilt']}", options, ModelOptions(),
                                  report=tmp_path / "r")
    assert sum(attacked) == metrics["attack"]["images"] == metrics["images"]
    assert (tmp_path / "r" / "instances.png").is_file()
    table = pq.read_table(tmp_path / "r" / "per_instance.parquet").to_pandas()
    first = table[(table.template == metrics["templates"][0]) & table.bias_vl.notna()]
    expected = []
    for side in ("male", "female"):  # the selection rule, computed from the per-instance values
        rows = first[first.bias_class == side]
        order = np.lexsort((rows.index.to_numpy(), -rows.bias_vl.abs().to_numpy()))
        expected += rows.index.to_numpy()[order][:2].tolist()
    report = (tmp_path / "r" / "report.md").read_text()
    shown = report.split("## Instance examples (Fig. 6)")[1].split("![examples]")[0]
    assert [line.split("|")[1].strip() for line in shown.strip().splitlines()[2:]] == \
        table.image_id[expected].tolist()


def test_a_report_into_what_the_command_reads_is_refused(cli, tiny, tmp_path):
    """`counterbias --report` inside the VL-Bias build, `counterbias-compare A B --out A` (or inside B):
    one line before anything is read or written; the build still verifies."""
    before = sorted((p.relative_to(tiny["data"]), p.stat().st_mtime_ns) for p in tiny["data"].rglob("*"))
    code, _, err = cli("counterbias", "--data", tiny["data"], "--model", f"hf:{tiny['vilt']}", "--attack", "none",
                       "--report", tiny["data"] / "report")
    assert_one_error_line(code, err, ("--report", "lies inside the --data"))
    assert sorted((p.relative_to(tiny["data"]), p.stat().st_mtime_ns) for p in tiny["data"].rglob("*")) == before
    code, _, err = cli("verify", tiny["data"])
    assert code == 0, err
    for name in "ab":
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text("{}")
    for out, needle in ((tmp_path / "a", "is the report A"), (tmp_path / "b" / "ab", "lies inside the report B")):
        code, _, err = cli("counterbias-compare", tmp_path / "a", tmp_path / "b", "--out", out)
        assert_one_error_line(code, err, ("--out", needle))
    assert [(p.name, p.read_text()) for p in sorted((tmp_path / "a").iterdir())] == [("metrics.json", "{}")]
    # a report folder without its per-instance values: one line, not a traceback
    code, _, err = cli("counterbias-compare", tmp_path / "a", tmp_path / "b")
    assert_one_error_line(code, err, ("not a CounterBias report (no per_instance.parquet",))


@pytest.mark.slow  # three models measured
def test_compare_two_models_cell_by_cell_with_paired_intervals(cli, tiny, tmp_path):
    """FairVLP's loop (§5): A and B measured on the same split; every cell of the comparison is B - A of
    the two reports' own values, its paired interval brackets it, and A against A changes nothing."""
    other = write_tiny_vilt_mlm(tmp_path / "vilt_b", seed=1)
    counterbias_reports(cli, tiny["data"], {"a": tiny["vilt"], "b": other}, tmp_path, "--eps", "0.02", "--steps", "3")
    code, out, err = cli("counterbias-compare", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "ab",
                         "--bootstrap", "200")
    assert code == 0, err
    assert "vl: B - A of the mean |bias| in %" in out
    a, b = (json.loads((tmp_path / n / "metrics.json").read_text()) for n in "ab")
    ab = json.loads((tmp_path / "ab" / "metrics.json").read_text())
    for m in ("vl", "v", "l", "l_log"):
        for kind in ("activity", "occupation"):
            cells = ab["measures"][m][kind]
            assert cells["avg"]["a"] == pytest.approx(a["measures"][m]["avg"][kind])
            assert cells["avg"]["b"] == pytest.approx(b["measures"][m]["avg"][kind])
            lo, hi = cells["avg"]["diff_interval"]
            assert lo <= cells["avg"]["diff"] <= hi
            for t in a["templates"]:
                assert cells[t]["b"] == pytest.approx(b["measures"][m]["templates"][t][kind]["mean_abs"])
            for target, value in a["measures"][m]["per_target_avg"][kind].items():
                cell = cells[f"target:{target}"]
                assert cell["a"] == pytest.approx(value)
                assert cell["diff"] == pytest.approx(b["measures"][m]["per_target_avg"][kind][target] - value)
                # a resample that draws none of a target's 4 images leaves its bias undefined: no interval
                lo, hi = cell["diff_interval"] or (cell["diff"], cell["diff"])
                assert lo <= cell["diff"] + 1e-9 and cell["diff"] - 1e-9 <= hi
                assert cell["abs_change"] == pytest.approx(abs(cell["b"]) - abs(cell["a"]))
    report = (tmp_path / "ab" / "report.md").read_text()
    assert "## B@V-L (Eq. 6), activity" in report and "| Avg. |" in report and "change in abs. bias" in report

    code, _, err = cli("counterbias-compare", tmp_path / "a", tmp_path / "a", "--out", tmp_path / "aa")
    assert code == 0, err
    same = json.loads((tmp_path / "aa" / "metrics.json").read_text())["measures"]["vl"]["activity"]["avg"]
    assert same["diff"] == 0 and same["diff_interval"] == [0, 0]

    shard = tiny["data"] / "default" / "test-00000-of-00001.parquet"
    fewer = tmp_path / "fewer"
    (fewer / "default").mkdir(parents=True)
    t = pq.read_table(shard)
    pq.write_table(t.slice(0, 80), fewer / "default" / shard.name)
    code, _, err = cli("counterbias", "--data", fewer, "--model", f"hf:{other}", "--attack", "none",
                       "--report", tmp_path / "c", "--bootstrap", "0")
    assert code == 0, err
    for args, needle in (((tmp_path / "a", tmp_path / "c"), "not measured on the same rows"),
                         ((tmp_path / "a", tmp_path / "nowhere"), "not a CounterBias report")):
        code, _, err = cli("counterbias-compare", *args)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_fairvlp_finetuning_lowers_the_measured_language_bias(cli, tiny, tmp_path):
    """scripts/fairvlp_finetune.py (Eq. 14-16 on the ViLT path, counterfactual pairs regenerated each step):
    after 40 steps on the tiny split, CounterBias measured before and after, compared cell by cell --
    Eq. 14's KL between the factual and counterfactual captions' [MASK] distributions lowers B@L and the
    language-only Eq. 13, with paired intervals below zero."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "scripts" / "fairvlp_finetune.py"), "--model", str(tiny["vilt"]),
                           "--data", str(tiny["data"]), "--out", str(tmp_path / "after"), "--steps", "40",
                           "--lr", "1e-3", "--eps", "0.03", "--attack-steps", "3"],
                          capture_output=True, text=True, cwd=root, timeout=600)
    assert done.returncode == 0, done.stderr
    history = json.loads((tmp_path / "after" / "fairvlp.json").read_text())["history"]
    assert len(history) == 40 and all(h["kl"] >= 0 for h in history)
    counterbias_reports(cli, tiny["data"], {"before": tiny["vilt"], "after": tmp_path / "after"}, tmp_path,
                        "--eps", "0.03", "--steps", "3")
    code, _, err = cli("counterbias-compare", tmp_path / "before", tmp_path / "after", "--out", tmp_path / "cmp",
                       "--bootstrap", "300")
    assert code == 0, err
    cells = json.loads((tmp_path / "cmp" / "metrics.json").read_text())["measures"]
    for m in ("l", "l_log"):
        for kind in ("activity", "occupation"):
            assert cells[m][kind]["avg"]["diff"] < 0, (m, kind, cells[m][kind]["avg"])
    assert cells["l_log"]["activity"]["avg"]["diff_interval"][1] < 0
    again = subprocess.run([sys.executable, str(root / "scripts" / "fairvlp_finetune.py"), "--model",
                            str(tiny["vilt"]), "--data", str(tiny["data"]), "--out", str(tmp_path / "after")],
                           capture_output=True, text=True, cwd=root, timeout=600)
    assert again.returncode == 2 and "exists" in again.stderr and len(again.stderr.strip().splitlines()) == 1
