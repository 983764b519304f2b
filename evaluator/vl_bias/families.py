"""Which bias probe (evaluator.vl_bias.probe) a model spec gets: the checkpoint's config decides between a
generative image-text-to-text VLM, a dual encoder (CLIP, SigLIP), a ViLT masked LM and a text masked
LM; a `py:` factory returns its own probe."""

from __future__ import annotations

from core.errors import ModelError
from evaluator.models.options import ModelOptions
from evaluator.models.spec import hf_config, load_py_model, parse_spec
from evaluator.vl_bias.probe import BiasProbe


def load_probe(spec: str, options: ModelOptions) -> BiasProbe:
    """`hf:` ViLT masked LM, text masked LM, generative image-text-to-text VLM or CLIP / SigLIP dual
    encoder, or `py:module:factory` returning a `BiasProbe`."""
    kind, name = parse_spec(spec)
    if kind == "py":
        model = load_py_model(name, "score", "score(queries, candidates)")
        if not isinstance(model, BiasProbe):
            raise ModelError(f"--model {spec}: the factory's object is not an evaluator.vl_bias.probe.BiasProbe")
        return model
    if kind == "vllm":
        raise ModelError(f"--model {spec}: CounterBias attacks the image through the vision tower's gradients, "
                         "which vLLM does not compute; measure the same checkpoint as hf:" + name)
    if kind != "hf":
        raise ModelError(f"--model {spec}: CounterBias measures hf:<hub id or path> (a masked LM, a generative "
                         "VLM, CLIP or SigLIP) or py:<module>:<factory>")
    config = hf_config(name, options.revision)
    from evaluator.models.vlm_checkpoint import is_generative

    if is_generative(config):
        from evaluator.vl_bias.generative import GenerativeProbe

        return GenerativeProbe(name, config, options)
    if config.model_type in ("clip", "siglip", "siglip2"):
        from evaluator.vl_bias.dual_encoder import DualEncoderProbe

        return DualEncoderProbe(name, config, options)
    from evaluator.vl_bias.mlm import TextMaskedLM, ViltMaskedLM

    if config.model_type == "vilt":
        if "ViltForMaskedLM" not in (config.architectures or []):
            raise ModelError(f"hf:{name}: a ViLT checkpoint without its masked-LM head "
                             f"({', '.join(config.architectures or ['no architecture'])}); "
                             "use e.g. dandelin/vilt-b32-mlm")
        return ViltMaskedLM(name, options)
    return TextMaskedLM(name, options)
