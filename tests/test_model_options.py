"""The model options, declared once (evaluator/models/options.py, MODEL_OPTIONS): the flags of every command
that runs a model, the resolver's refusal of an option the model would not read, and the options the
prediction record lists all come from that declaration; this checks each against it, option by option."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest
import typer
from helpers import assert_one_error_line

from evaluator.models.options import MODEL_OPTIONS, ModelOptions, recorded_options

# a valid value, other than the default, for each flag (what the command line reads)
VALUES = {"gen_kwargs": "temperature=0.5", "stop": "x", "reasoning_tags": "<a>,</a>",
          "chat_template_kwargs": "k=1", "engine_args": "kv_cache_dtype=fp8", "judge": "openai:j",
          "gpu_memory_utilization": "0.5", "request_timeout": "5"}


def _value(option) -> list[str]:
    if option.field in VALUES:
        return [option.flag, VALUES[option.field]]
    kind = option.cli or option.type
    if kind is bool:
        return [option.flag]
    if typing.get_origin(kind) is typing.Literal:
        return [option.flag, next(v for v in typing.get_args(kind) if v != option.default)]
    if kind in (int, typing.Optional[int]):
        return [option.flag, str((option.default or 1) + 1)]
    return [option.flag, "x"]


def test_every_field_is_declared_once_and_every_flag_reaches_the_commands():
    fields = [o.field for o in MODEL_OPTIONS]
    assert len(fields) == len(set(fields)) == len(dataclasses.fields(ModelOptions))
    from pipelines.cli import app

    group = typer.main.get_command(app)
    for command in ("predict", "perceptual", "suite"):
        flags = {opt for p in group.commands[command].params for opt in p.opts}
        assert {o.flag for o in MODEL_OPTIONS if o.flag} <= flags, command


@pytest.mark.parametrize("option", [o for o in MODEL_OPTIONS if o.flag and "baseline" not in o.readers],
                         ids=lambda o: o.flag)
def test_an_option_the_model_does_not_read_is_refused_naming_it(option, cli, built, tmp_path):
    bench = "socialiq" if option.field == "videos" else "gqa-ood"  # gqa-ood's rows have no videos at all
    code, _, err = cli("predict", bench, "--data", built(bench), "--model", "baseline:random", "--out",
                       tmp_path / "p.json", *_value(option))
    assert_one_error_line(code, err, [f"{option.flag}: baseline:random does not read it"])
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("option", [o for o in MODEL_OPTIONS if o.flag and "openai" not in o.readers],
                         ids=lambda o: o.flag)
def test_an_option_a_served_model_does_not_read_is_refused(option, cli, built, tmp_path):
    code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--model", "openai:m", "--base-url",
                       "http://127.0.0.1:9/v1", "--out", tmp_path / "p.json", *_value(option))
    assert_one_error_line(code, err, [f"{option.flag}: openai:m does not read it"])


def test_the_record_lists_the_options_the_model_reads(cli, built, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = cli("predict", "gqa-ood", "--data", built("gqa-ood"), "--model", "baseline:random", "--out", out)
    assert code == 0, err
    listed = json.loads(out.with_suffix(".meta.json").read_text())["options"]
    assert set(listed) == {o.field for o in MODEL_OPTIONS if "baseline" in o.readers and o.field != "data"}
    assert "max_new_tokens" not in listed and "train_file" in listed
    assert recorded_options(ModelOptions(), "openai")["base_url"] is None
