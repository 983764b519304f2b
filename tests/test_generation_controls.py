"""The generation controls lmms-eval users expect (`vlbench predict`): a system prompt, a chat-template
override, stop strings, `--gen-kwargs` (greedy stays the default), `--limit` / `--offset`, `--revision`,
`--attn-implementation` and `--device-map`, each recorded in the prediction's `.meta.json`.

The model is the tiny LLaVA of pipelines/tiny_models.py whose generation config biases decoding to
the answer "Yes" (`write_tiny_llava_answering`): what it answers is known, so a stop string's cut is."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import assert_one_error_line

from core.errors import ParamsError
from evaluator.models.generation import Generation, parse_gen_kwargs
from pipelines.tiny_models import write_tiny_llava_answering


@pytest.fixture(scope="module")
def yes_model(tmp_path_factory) -> Path:
    return write_tiny_llava_answering(tmp_path_factory.mktemp("yes") / "tiny-llava-yes", "Yes")


@pytest.fixture(scope="module")
def images(built, tmp_path_factory) -> Path:
    """A plain image for every GQA-OOD test-dev image id (the GQA sample has no image files)."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("gqa-images")
    table = pq.read_table(built("gqa-ood") / "all" / "testdev-00000-of-00001.parquet", columns=["imageId"])
    for image_id in set(table.column(0).to_pylist()):
        Image.new("RGB", (24, 24), (200, 30, 30)).save(folder / f"{image_id}.jpg")
    return folder


def _predict(cli, data, model, images, out, *extra):
    code, _, err = cli("predict", "gqa-ood", "--data", data, "--model", f"hf:{model}", "--images", images,
                       "--out", out, "--batch-size", "4", *extra)
    return code, err


def _meta(out: Path) -> dict:
    return json.loads(out.with_suffix(".meta.json").read_text())


@pytest.mark.parametrize("text,parsed", [
    ("temperature=0.2,top_p=0.9,num_beams=3", (("temperature", 0.2), ("top_p", 0.9), ("num_beams", 3))),
    (" do_sample = true , top_k=5", (("do_sample", True), ("top_k", 5))),
    ("", ()),
])
def test_gen_kwargs_are_parsed_and_typed(text, parsed):
    assert parse_gen_kwargs(text) == parsed


@pytest.mark.parametrize("text,needle", [
    ("temperature=-1", "expected >= 0"), ("top_p=1.5", "in (0, 1]"), ("num_beams=two", "a whole number"),
    ("max_new_tokens=8", "the answer length is --max-new-tokens"), ("temperature", "NAME=VALUE"),
    ("top_k=1,top_k=2", "given twice"), ("temperature=nan", "expected >= 0"), ("do_sample=maybe", "true or false"),
    ("do_sample=true,temperature=0", "sampling at temperature 0 is undefined"),
])
def test_bad_gen_kwargs_are_one_error(text, needle):
    with pytest.raises(ParamsError, match=None) as caught:
        parse_gen_kwargs(text)
    assert needle in str(caught.value) and str(caught.value).startswith("--gen-kwargs")


def test_sampling_follows_lmms_evals_rule():
    """temperature > 0 samples unless do_sample says otherwise; greedy drops the sampling-only arguments."""
    assert not Generation().sampling and Generation().greedy
    assert Generation(kwargs=(("temperature", 0.7),)).sampling
    assert not Generation(kwargs=(("temperature", 0.7), ("do_sample", False))).sampling
    assert Generation(kwargs=(("temperature", 0.0), ("top_p", 0.5))).generate_kwargs() == {
        "max_new_tokens": 16, "do_sample": False, "num_beams": 1}
    beams = Generation(kwargs=(("num_beams", 3),))
    assert not beams.greedy and beams.generate_kwargs()["num_beams"] == 3
    assert Generation(stop=("\n", "ASSISTANT")).cut("Yes ASSISTANT: more\nand") == "Yes "


def test_greedy_default_and_the_record(yes_model, images, built, cli, tmp_path):
    out = tmp_path / "p.json"
    code, err = _predict(cli, built("gqa-ood"), yes_model, images, out, "--limit", "6")
    assert code == 0, err
    assert [p["prediction"] for p in json.loads(out.read_text())] == ["yes"] * 6  # "Yes", in GQA's lower case
    assert _meta(out)["asked"]["generation"] == {"greedy": True, "max_new_tokens": 16, "do_sample": False}


def test_stop_strings_cut_the_answer(yes_model, images, built, cli, tmp_path):
    out = tmp_path / "p.json"
    code, err = _predict(cli, built("gqa-ood"), yes_model, images, out, "--limit", "4", "--stop", "s", "--log-samples")
    assert code == 0, err
    samples = [json.loads(line) for line in (tmp_path / "p.samples.jsonl").read_text().splitlines()]
    assert {s["output"] for s in samples} == {"Ye"}  # "Yes" cut before its "s"
    assert _meta(out)["asked"]["generation"]["stop"] == ["s"]


def test_a_stop_written_as_backslash_n_is_a_newline():
    from evaluator.models.generation import parse_stop

    # what a shell passes for --stop '\n', --stop 'a\tb' and --stop '\\n' (a literal backslash-n)
    assert parse_stop(["\\n", "a\\tb", "\\\\n"]) == ("\n", "a\tb", "\\n")


def test_limit_offset_and_evaluate_with_allow_partial(yes_model, images, built, cli, tmp_path):
    out = tmp_path / "p.json"
    code, err = _predict(cli, built("gqa-ood"), yes_model, images, out, "--limit", "5", "--offset", "3")
    assert code == 0, err
    ids = pq.read_table(built("gqa-ood") / "all" / "testdev-00000-of-00001.parquet",
                        columns=["question_id"]).column(0).to_pylist()
    assert [p["questionId"] for p in json.loads(out.read_text())] == ids[3:8]
    meta = _meta(out)
    assert meta["rows"] == 5 and (meta["options"]["limit"], meta["options"]["offset"]) == (5, 3)
    code, _, err = cli("evaluate", "gqa-ood", "--data", built("gqa-ood"), "--predictions", out, "--bootstrap", "0")
    assert_one_error_line(code, err, ["have no prediction", "--allow-partial"])
    code, stdout, err = cli("evaluate", "gqa-ood", "--data", built("gqa-ood"), "--predictions", out, "--bootstrap", "0",
                            "--allow-partial", "--report", tmp_path / "r")
    assert code == 0 and json.loads((tmp_path / "r" / "metrics.json").read_text())["coverage"]["scored"] == 5
    assert "- Rows: 5 from row 3 (--limit / --offset)" in (tmp_path / "r" / "report.md").read_text()
    code, err = _predict(cli, built("gqa-ood"), yes_model, images, tmp_path / "q.json", "--offset", str(len(ids)))
    assert_one_error_line(code, err, ["--offset", f"has {len(ids):,} rows"])


def test_system_prompt_and_chat_template_reach_the_prompt(yes_model, tmp_path):
    from evaluator.models.backend import Turn
    from evaluator.models.options import ModelOptions
    from evaluator.models.spec import hf_config
    from evaluator.models.transformers_vlm import TransformersVLM
    from evaluator.models.vlm_checkpoint import read_chat_template

    turn = Turn("Is it red?", ())
    options = ModelOptions(system_prompt="Answer tersely.")
    text = TransformersVLM(str(yes_model), hf_config(str(yes_model)), options).prompt_text(turn)
    # the tiny model's LLaVA-style template: a system turn, then the user's
    assert text.startswith("SYSTEM: Answer tersely.") and text.index("SYSTEM") < text.index("USER: Is it red?")
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}<<{{ m['role'] }}>>{% for c in m['content'] %}"
                        "{{ c.get('text', '') }}{% endfor %}{% endfor %}<<assistant>>")
    vlm = TransformersVLM(str(yes_model), hf_config(str(yes_model)), ModelOptions(chat_template=template),
                        read_chat_template(template))
    assert vlm.prompt_text(turn) == "<<user>>Is it red?<<assistant>>"


def test_record_of_the_loading_options(yes_model, images, built, cli, tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}{{ m['role'] }}: {% for c in m['content'] %}{% if c['type'] == "
                        "'image' %}<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n{% endfor %}ASSISTANT:")
    out = tmp_path / "p.json"
    code, err = _predict(cli, built("gqa-ood"), yes_model, images, out, "--limit", "3", "--system-prompt", "Be brief.",
                         "--chat-template", template, "--attn-implementation", "eager", "--device-map", "auto",
                         "--gen-kwargs", "num_beams=2")
    assert code == 0, err
    meta = _meta(out)
    assert (meta["system_prompt"], meta["chat_template"], meta["attn_implementation"], meta["device_map"]) == (
        "Be brief.", str(template), "eager", "auto")
    assert meta["asked"]["generation"] == {"greedy": False, "max_new_tokens": 16, "num_beams": 2, "do_sample": False}
    assert [p["prediction"] for p in json.loads(out.read_text())] == ["yes"] * 3


def test_sampling_is_seeded(yes_model, images, built, cli, tmp_path):
    runs = []
    for k in range(2):
        out = tmp_path / f"p{k}.json"
        code, err = _predict(cli, built("gqa-ood"), yes_model, images, out, "--limit", "4", "--gen-kwargs",
                             "temperature=1.5,top_k=5", "--seed", "7", "--log-samples")
        assert code == 0, err
        runs.append((tmp_path / f"p{k}.samples.jsonl").read_text())
    assert runs[0] == runs[1]
    assert _meta(tmp_path / "p0.json")["asked"]["generation"]["do_sample"] is True


@pytest.mark.parametrize("args,needle", [
    (("--revision", "main"), "is a local folder; a revision names a hub checkpoint"),
    (("--attn-implementation", "magic"), "--attn-implementation magic: expected one of eager"),
    (("--device-map", "everywhere"), "--device-map everywhere: expected one of auto"),
    (("--chat-template", "MISSING"), "--chat-template"),
    (("--chat-template", "BROKEN"), "not a Jinja template"),
    (("--gen-kwargs", "beams=2"), "--gen-kwargs beams: not a decoding argument"),
    (("--stop", ""), "--stop: an empty string"),
    # an attention implementation that is not installed here (flash-attention needs CUDA)
    (("--attn-implementation", "flash_attention_2"), "cannot load (FlashAttention2"),
    # bounds checked against the model's context (the tiny LLaVA's 2,048 positions) before a forward pass
    (("--max-new-tokens", "100000000"), "context holds 2,048 tokens"),
    (("--max-new-tokens", "2040"), "exceed the model's context of 2,048 tokens"),
    (("--prompt", "{question}" + " and more" * 300), "exceed the model's context of 2,048 tokens"),
    (("--chat-template", "NO-IMAGE"), "writes no image placeholder (<image>) for a turn that shows 1 image"),
])
def test_bad_controls_are_one_line(args, needle, yes_model, images, built, cli, tmp_path):
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}")
    no_image = tmp_path / "no-image.jinja"  # a template that drops the message's image
    no_image.write_text("{% for m in messages %}{% for c in m['content'] %}{% if c['type'] == 'text' %}"
                        "{{ c['text'] }}{% endif %}{% endfor %}{% endfor %}ASSISTANT:")
    named = {"MISSING": tmp_path / "missing.jinja", "BROKEN": broken, "NO-IMAGE": no_image}
    args = tuple(str(named[a]) if a in named else a for a in args)
    code, err = _predict(cli, built("gqa-ood"), yes_model, images, tmp_path / "p.json", "--limit", "2", *args)
    assert_one_error_line(code, err, [needle])
    assert not (tmp_path / "p.json").exists()


def test_generative_controls_with_another_model_kind(built, cli, tmp_path):
    code, _, err = cli("predict", "gqa-ood", "--data", built("gqa-ood"), "--model", "baseline:random", "--out",
                       tmp_path / "p.json", "--system-prompt", "x")
    assert_one_error_line(code, err, ["--system-prompt: baseline:random does not read it (it applies to generative"])
