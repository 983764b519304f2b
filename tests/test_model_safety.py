"""Model folders are checked before any weight is read and never run code (core/model_files.py):
pickle-only weights refused unless `vlbench --allow-pickle-weights`, a config naming its own code
(`auto_map`) or a Sentence-BERT module outside sentence_transformers refused, a damaged safetensors
header refused, a folder that is no model (`--param sbert_model=/etc`) refused before the build reads
anything; each as one `error:` line that says why (never how to switch the protection off)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from helpers import assert_one_error_line, nli_labels

from builders.nlp import PACKAGED_MINILM, NLIClassifier, resolve_model_path
from core.errors import ModelError
from core.model_files import allow_pickle_weights, load_kwargs
from pipelines.tiny_models import write_tiny_sequence_classifier

LABELS = {0: "contradiction", 1: "neutral", 2: "entailment"}


@pytest.fixture(scope="module")
def safe_model(tmp_path_factory) -> Path:
    return write_tiny_sequence_classifier(tmp_path_factory.mktemp("safe") / "nli", LABELS, favour=2)


def _pickle_only(safe: Path, folder: Path) -> Path:
    """The same model with its weights as a pickle (`torch.save`, what save_pretrained writes with
    safe_serialization=False)."""
    import torch
    from safetensors.torch import load_file

    shutil.copytree(safe, folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    return folder


def _edit_json(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _header_claims(folder: Path, length: int) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", length) + data[8:])


def _tensor_outside(folder: Path) -> None:
    """A header whose first tensor ends past the file (a truncated or forged file)."""
    path = folder / "model.safetensors"
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"][1] = len(data) * 4
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + length:])


HOSTILE = {  # name: (how the safe model is damaged, what the line says)
    "pickle-only": (lambda f: None, "holds pickle weights only (pytorch_model.bin)"),
    "auto-map": (lambda f: _edit_json(f / "config.json", auto_map={"AutoModel": "modeling_evil.Evil"}),
                 "config.json names the model's own Python code (auto_map)"),
    "tokenizer-auto-map": (lambda f: _edit_json(f / "tokenizer_config.json",
                                                auto_map={"AutoTokenizer": ["evil.Tok", None]}),
                           "tokenizer_config.json names the model's own Python code"),
    "header-2**62": (lambda f: _header_claims(f, 2 ** 62), "model.safetensors is damaged (its header claims"),
    "tensor-outside": (_tensor_outside, "lies outside the file's"),
    "no-config": (lambda f: (f / "config.json").unlink(), "not a model folder (no config.json)"),
    "bad-config": (lambda f: (f / "config.json").write_text("{" * 50_000), "config.json is not valid JSON"),
    "no-weights": (lambda f: (f / "model.safetensors").unlink(), "no weights"),
}


def _hostile(kind: str, safe: Path, root: Path) -> Path:
    folder = root / kind
    if kind == "pickle-only":
        return _pickle_only(safe, folder)
    shutil.copytree(safe, folder)
    HOSTILE[kind][0](folder)
    return folder


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_folder_is_refused_before_its_weights_are_read(kind, safe_model, tmp_path):
    folder = _hostile(kind, safe_model, tmp_path)
    with pytest.raises(ModelError) as caught:
        NLIClassifier(str(folder))._load()
    message = str(caught.value)
    assert HOSTILE[kind][1] in message and message.startswith(f"nli_model={folder}:"), message
    assert "weights_only" not in message and "allow" not in message  # why, never how to switch it off


def test_the_safe_model_loads_with_safetensors(safe_model):
    assert load_kwargs(str(safe_model), "x") == {"use_safetensors": True}
    assert nli_labels(NLIClassifier(str(safe_model)), [("A man runs.", "A person runs.")]) == ["entailment"]


def test_pickle_weights_load_only_when_the_user_allows_them(safe_model, tmp_path):
    folder = _pickle_only(safe_model, tmp_path / "pickled")
    try:
        allow_pickle_weights(True)
        assert load_kwargs(str(folder), "x") == {"use_safetensors": False}
        # the same weights, so the same answer as the safetensors copy
        assert nli_labels(NLIClassifier(str(folder)), [("A man runs.", "A person runs.")]) == ["entailment"]
    finally:
        allow_pickle_weights(False)
    with pytest.raises(ModelError):
        load_kwargs(str(folder), "x")


def test_a_sentence_bert_module_outside_sentence_transformers_is_refused(tmp_path):
    folder = tmp_path / "minilm"
    shutil.copytree(resolve_model_path(PACKAGED_MINILM), folder)
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": len(modules), "name": "evil", "path": "evil", "type": "evil_module.Steal"})
    (folder / "modules.json").write_text(json.dumps(modules))
    from builders.nlp import SentenceEncoder

    with pytest.raises(ModelError, match="modules.json names a module outside sentence_transformers"):
        SentenceEncoder(str(folder)).encode(["a text"])


@pytest.mark.parametrize("param,folder,needle", [
    ("sbert_model", "/etc", "sbert_model=/etc: not a model folder (no config.json)"),
    ("nli_model", "PICKLED", "holds pickle weights only"),
    ("sbert_model", "HEADER", "is damaged (its header claims"),
])
def test_build_model_params_are_checked_before_the_build_reads(param, folder, needle, safe_model, cli, tmp_path):
    """The source folder does not exist: the model is refused first (the params are checked when
    they are parsed, not 18 s into the build when the model is first needed)."""
    if folder == "PICKLED":
        folder = _pickle_only(safe_model, tmp_path / "pickled")
    elif folder == "HEADER":
        folder = _hostile("header-2**62", safe_model, tmp_path)
    code, _, err = cli("build", "vcr-visor", "--source", tmp_path / "no-sources", "--out", tmp_path / "out",
                       "--param", f"{param}={folder}")
    assert_one_error_line(code, err, [needle])
    assert not (tmp_path / "out").exists()


def test_hf_specs_are_checked_before_loading(built, safe_model, cli, tmp_path):
    for kind in ("pickle-only", "auto-map", "header-2**62"):
        folder = _hostile(kind, safe_model, tmp_path)
        code, _, err = cli("predict", "gqa-ood", "--data", built("gqa-ood"), "--model", f"hf:{folder}", "--out",
                           tmp_path / "p.json")
        assert_one_error_line(code, err, [f"hf:{folder}", HOSTILE[kind][1]])
        assert not (tmp_path / "p.json").exists()


@pytest.mark.slow  # a vcr-visor build with the packaged MiniLM and the tiny NLI model
def test_allow_pickle_weights_flag_loads_a_pickled_model_in_a_build(safe_model, sample_sources, cli, tmp_path):
    folder = _pickle_only(safe_model, tmp_path / "pickled")
    args = ("build", "vcr-visor", "--source", sample_sources, "--out", tmp_path / "out", "--param",
            f"sbert_model={PACKAGED_MINILM}", "--param", f"nli_model={folder}")
    code, _, err = cli(*args)
    assert_one_error_line(code, err, ["holds pickle weights only"])
    code, _, err = cli("--allow-pickle-weights", *args)
    assert code == 0, err
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["run"]["models"]["nli"]["computed"] > 0
    code, _, err = cli(*args[:5], tmp_path / "out2", *args[6:])  # the flag holds for its own command only
    assert code == 2 and "holds pickle weights only" in err


def _llava_with(root: Path, edit) -> Path:
    from pipelines.tiny_models import write_tiny_llava

    folder = write_tiny_llava(root / "llava")
    config = json.loads((folder / "config.json").read_text())
    edit(config, folder)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("edit,needles", [
    (lambda c, f: c["text_config"].update(num_attention_heads=0),
     ("config.json text_config num_attention_heads is 0", "positive integers")),
    (lambda c, f: c["text_config"].update(intermediate_size=-5), ("text_config intermediate_size is -5",)),
    (lambda c, f: c["vision_config"].update(hidden_size=-32), ("vision_config hidden_size is -32",)),
    (lambda c, f: c["text_config"].update(vocab_size="100"), ("text_config vocab_size is 100",)),
    # the fast tokenizer's file gone (and no slow one to convert): the library's reason on one line
    (lambda c, f: [(f / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json")],
     ("cannot load the processor", "instantiate the backend tokenizer")),
])
def test_a_config_no_model_can_be_built_from_is_one_line(edit, needles, built, sample_sources, cli, tmp_path):
    """Zero heads, a negative width, a size given as text (transformers raised a ZeroDivisionError, a negative
    tensor dimension, an assertion) and a tokenizer with no files: one line naming the model, exit 2, nothing
    written."""
    folder = _llava_with(tmp_path, edit)
    code, _, err = cli("predict", "gqa-ood", "--data", built("gqa-ood"), "--images", sample_sources / "gqa" / "images",
                       "--model", f"hf:{folder}", "--limit", "2", "--out", tmp_path / "p.json")
    assert_one_error_line(code, err, (f"hf:{folder}", *needles))
    assert not (tmp_path / "p.json").exists()


@pytest.fixture(scope="module")
def tiny_llava(tmp_path_factory):
    from pipelines.tiny_models import write_tiny_llava

    return write_tiny_llava(tmp_path_factory.mktemp("llava") / "llava")


@pytest.mark.parametrize("edit, needle", [
    (lambda c: c["text_config"].update(num_hidden_layers=10 ** 9), "num_hidden_layers is 1,000,000,000, more than"),
    (lambda c: c["text_config"].update(vocab_size=10 ** 10), "vocab_size is 10,000,000,000, more than"),
    (lambda c: c["text_config"].update(hidden_size=30, head_dim=None), "hidden_size 30 is not a multiple of"),
    (lambda c: c["text_config"].update(num_key_value_heads=3), "num_attention_heads 4 is not a multiple of"),
    (lambda c: c.update(image_token_index=10 ** 6), "image_token_index is 1000000, outside the text model's"),
    (lambda c: c.update(architectures=["Qwen2VLForConditionalGeneration"]), "belongs to another family"),
    (lambda c: c["text_config"].update(hidden_act=5), "cannot load (Validation error for field 'hidden_act'"),
])
def test_a_checkpoint_that_lies_is_one_line_before_any_weight_is_built(edit, needle, tiny_llava, built, cli,
                                                                       tmp_path):
    """A config.json whose sizes no model has (10^9 layers: before, the library built it for hours), heads that do
    not divide, an image token outside the vocabulary, a class of another family, or a field the library's strict
    validation refuses (before: its traceback): one line naming the model, exit 2, nothing written. Goldens: the
    demo's tiny LLaVA (2 layers, width 32, 4 heads, 2 key-value heads, vocabulary 100), one field changed."""
    folder = tmp_path / "lying"
    shutil.copytree(tiny_llava, folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    code, _, err = cli("predict", "gqa-ood", "--data", built("gqa-ood"), "--model", f"hf:{folder}", "--out",
                       tmp_path / "p.json")
    assert_one_error_line(code, err, [f"hf:{folder}", needle])
    assert not (tmp_path / "p.json").exists()
