"""Reading an image-text-to-text checkpoint before a backend is chosen: whether a config is of that family,
its processor (with only its image and text parts where torchvision is missing), a `--chat-template` file,
the weights' revision and the image processor's size. The resolver (evaluator/models/resolve.py) asks these
first; the backends that run the checkpoint here (`hf:`, `vllm:`) load through them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from core.errors import ModelError
from core.model_files import exception_line, load_part


def read_chat_template(path: Path | None) -> str | None:
    """`--chat-template FILE`: its text, checked to be a Jinja template (before the weights load)."""
    if path is None:
        return None
    from jinja2 import Environment, TemplateSyntaxError

    try:
        text = Path(path).read_text(encoding="utf-8")
        Environment().parse(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"--chat-template {path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    except TemplateSyntaxError as exc:
        raise ModelError(f"--chat-template {path}: not a Jinja template (line {exc.lineno}: {exc.message})") from None
    return text


def template_text(template) -> str:
    """A processor's chat template as one text (a processor may hold several named ones)."""
    return "\n".join(template.values()) if isinstance(template, dict) else str(template)


def is_generative(config) -> bool:
    """Whether a transformers config belongs to the image-text-to-text family."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def is_text_lm(config) -> bool:
    """Whether a transformers config is a text-only causal LM (AutoModelForCausalLM's, no image part): a model
    that answers a benchmark's prompts without their pictures, a VLM's base LLM. A checkpoint that names its
    architectures must name the causal-LM class of its model type: a RoBERTa cross-encoder
    (RobertaForSequenceClassification) is not one, though transformers also has a RobertaForCausalLM."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from evaluator.models.families import causal_multimodal

    causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.model_type)
    named = getattr(config, "architectures", None) or [causal]
    return causal is not None and causal in named and not is_generative(config) and not causal_multimodal(config)


VIDEO_PART_NOTE = ("the processor's video part needs torchvision (not installed): loaded its image and text parts "
                   "only (no benchmark here reads video)")


def _image_only_processor(path: str, config, spec: str) -> tuple[object, str]:
    """(processor, note): the processor without its video part, for installs without torchvision: the image
    processor, the tokenizer and the chat template of the checkpoint, in the checkpoint's processor class (or,
    for a class transformers offers only with torchvision, vlbench's build of it: evaluator/models/pixtral.py),
    with the settings its processor_config.json saves (LLaVA-OneVision's image-token count, InternVL's image
    sequence length, Mistral 3's patch size...). A processor that cannot be built without its video part (its
    image processor or its constructor needs torchvision) is one error line saying to install torchvision."""
    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    from evaluator.models.pixtral import WITHOUT_TORCHVISION

    name = PROCESSOR_MAPPING_NAMES.get(config.model_type) or ""
    base, note = getattr(transformers, name, None), VIDEO_PART_NOTE
    if base is None:
        raise ModelError(f"{spec}: no processor class known for a {config.model_type} model")
    try:
        attributes = base.get_attributes()
    except ImportError:  # a processor class transformers offers only with torchvision (Mistral 3's Pixtral)
        if name not in WITHOUT_TORCHVISION:
            raise ModelError(f"{spec}: the {name} needs torchvision; pip install torchvision") from None
        base = WITHOUT_TORCHVISION[name]
        attributes = base.get_attributes()
        note = (f"transformers offers the {name} only with torchvision (not installed): vlbench built its "
                f"{base.__name__}, the same image tokens over the PIL image processor")
    attributes = [a for a in attributes if "video" not in a]
    if set(attributes) != {"image_processor", "tokenizer"}:
        raise ModelError(f"{spec}: the {base.__name__} needs torchvision for more than videos; pip install torchvision")
    image_only = type(f"ImageOnly{base.__name__}", (base,), {"get_attributes": classmethod(lambda cls: attributes)})
    template = None
    jinja = Path(path) / "chat_template.jinja"
    if jinja.is_file():
        template = jinja.read_text()
    tokenizer = load_part(AutoTokenizer, path, spec, "tokenizer")
    image_processor = load_part(AutoImageProcessor, path, spec, "image processor")
    try:
        saved, _ = base.get_processor_dict(path)
        nested_video = saved.get("video_processor")  # where transformers 5's save_pretrained writes the settings
        for key in (*base.get_attributes(), "chat_template", "auto_map", "processor_class"):
            saved.pop(key, None)  # the parts (built here, the video part left out) and what is passed below
        processor = image_only.from_args_and_dict([image_processor, tokenizer], {**saved, **without_video(base)},
                                                  chat_template=template or getattr(tokenizer, "chat_template", None))
    except (ImportError, OSError, ValueError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ModelError(f"{spec}: the {base.__name__} cannot be built without torchvision ({first[:200]}); "
                         "pip install torchvision") from None
    video = Path(path) / "video_preprocessor_config.json"
    # the saved video settings some templates read (SmolVLM's frame count and rate), no processor: from their own
    # file (the hub's checkpoints), or from processor_config.json's `video_processor` (transformers 5 saves them so)
    settings = json.loads(video.read_text()) if video.is_file() else nested_video
    if isinstance(settings, dict):
        processor.video_processor = video_stand_in(settings)
    return processor, note


def video_stand_in(settings: dict) -> SimpleNamespace:
    """The saved video settings as the attributes a processor's template reads of its video processor: every key
    saved, and the frame count and rate as the video processor derives them (SmolVLM's from `video_sampling`'s
    `max_frames` and `fps`, the form the hub's checkpoints save; None where none is saved). A stand-in holding only
    the saved keys refused SmolVLM whose settings were nested so ("has no attribute num_frames")."""
    found = dict(settings)
    sampling = found.get("video_sampling")
    if isinstance(sampling, dict):
        found.setdefault("num_frames", sampling.get("max_frames"))
        found.setdefault("fps", sampling.get("fps"))
    found.setdefault("num_frames", None)
    found.setdefault("fps", None)
    return SimpleNamespace(**found)


def without_video(processor_class) -> dict:
    """The video arguments PROCESSOR_CLASS's constructor requires (SmolVLM's `video_processor`), as None: the
    processor is built from its image and text parts."""
    import inspect

    parameters = inspect.signature(processor_class.__init__).parameters.values()
    return {p.name: None for p in parameters if "video" in p.name and p.default is inspect.Parameter.empty}


def load_processor(path: str, config, revision: str | None = None, spec: str | None = None,
                   ) -> tuple[object, str | None]:
    """(processor, note): the note says when only the image and text parts could be loaded."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(path, **({"revision": revision} if revision else {})), None
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 -- files the processor cannot be built from: the model's, one line
        if not isinstance(exc, (ImportError, OSError)) or "torchvision" not in str(exc).lower():
            raise ModelError(f"{spec or 'hf:' + path}: cannot load the processor ({exception_line(exc)})") from None
    return _image_only_processor(path, config, spec or f"hf:{path}")


def snapshot_revision(path: str, config) -> str | None:
    """The revision of the weights: the hub cache's snapshot hash, or the config's commit hash."""
    parts = Path(path).expanduser().resolve().parts if Path(path).expanduser().exists() else ()
    if "snapshots" in parts[:-1]:
        return parts[parts.index("snapshots") + 1]
    return getattr(config, "_commit_hash", None)


def size_dict(size) -> dict:
    """An image processor's `size` (a dict or transformers' SizeDict) as a dict of its set entries."""
    if size is None:
        return {}
    items = size.items() if hasattr(size, "items") else vars(size).items()
    return {k: v for k, v in items if v is not None}
