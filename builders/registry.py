"""Benchmarks by name. A new benchmark adds one line here; modules are imported on first use."""

from __future__ import annotations

import importlib

from builders.errors import ParamsError

BUILDERS = {
    "disco": "builders.disco:DiscoBuilder",
    "gqa-ood": "builders.gqa_ood:GQAOODBuilder",
    "socialiq": "builders.socialiq:SocialIQBuilder",
    "vcr-visor": "builders.vcr_visor:VCRVisorBuilder",
    "vl-bias": "builders.vl_bias:VLBiasBuilder",
    "visdial": "builders.visdial:VisDialBuilder",
    "vqa-cp": "builders.vqa_cp:VQACPBuilder",
    "vqa-v2": "builders.vqa_v2:VQAv2Builder",
}


def builder_names() -> list[str]:
    return sorted(BUILDERS)


def get_builder(name: str):
    """An instance of the builder registered under `name`."""
    if name not in BUILDERS:
        raise ParamsError(f"unknown benchmark '{name}'; known: {', '.join(builder_names())}")
    module, _, cls = BUILDERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)()
