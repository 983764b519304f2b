"""Every benchmark, declared once: the builders' half of the registry. A `Benchmark` names (as
"module:attribute" strings, imported on first use so that `vlbench --help` stays instant) its builder,
the writer of its sample sources, the `--param` stand-ins that build it offline, and in one `Demo`
record what `vlbench demo` runs on it; `vlbench list`, `build`, `params`, `sample-sources`, `demo` and
the tests read this table (through `benchmarks()`). How a benchmark is scored is the other half of the
registry, a floor up in the evaluator's task table, joined by the name: a new benchmark adds one entry
to each; one kept elsewhere calls `register` here and `register_task` there.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from core.errors import ParamsError
from core.model_files import PACKAGED_MINILM


@dataclass(frozen=True)
class Demo:
    """What `vlbench demo` runs on a benchmark, after building it from the sample sources."""

    build: tuple[str, ...] = ()  # further `--param` choices of the demo build
    models: tuple[str, ...] = ()  # model specs the demo predicts and evaluates
    train_file: str | None = None  # their --train-file, under the sample sources' root
    perceptual: tuple[tuple[str, str | None], ...] = ()  # (model spec, --by column) of its perceptual scores
    legacy_json: bool = False  # the build also writes the authors' file format


@dataclass(frozen=True)
class Benchmark:
    name: str
    builder: str  # "module:Class" of its builders.base.Builder subclass
    samples: str  # "module:function" writing its raw sample sources (shared by benchmarks of one source)
    offline_build: tuple[str, ...] = ()  # `--param` stand-ins that build it offline (the packaged MiniLM...)
    demo: Demo = field(default_factory=Demo)

    @property
    def demo_params(self) -> list[str]:
        """The `--param` values of the demo build: the offline stand-ins, then the demo's choices."""
        return [*self.offline_build, *self.demo.build]

    def load(self, ref: str):
        module, _, attribute = ref.partition(":")
        return getattr(importlib.import_module(module), attribute)


OFFLINE_SBERT = (f"sbert_model={PACKAGED_MINILM}", "nli_model=none")  # the packaged MiniLM, no NLI filter

# Registration order is the demo's order; names are listed sorted elsewhere.
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("gqa-ood", "builders.gqa_ood.builder:GQAOODBuilder", "builders.gqa_ood.samples:write_gqa_samples",
              demo=Demo(models=("baseline:prior", "baseline:random"), train_file="gqa/train_balanced_questions.json",
                        legacy_json=True)),
    # Offline: the packaged MiniLM stands in for the recipe's SBERT, no NLI filter.
    Benchmark("vcr-visor", "builders.vcr_visor.builder:VCRVisorBuilder",
              "builders.sources.vcr_samples:write_vcr_samples", offline_build=OFFLINE_SBERT,
              demo=Demo(models=("baseline:random",))),
    Benchmark("vcr", "builders.vcr.builder:VCRBuilder", "builders.sources.vcr_samples:write_vcr_samples",
              demo=Demo(models=("baseline:random", "baseline:overlap"))),
    # COSIM-Q / COSIM-C (the VCR-Visor paper, App. C): the same offline stand-ins as vcr-visor.
    Benchmark("cosim-q", "builders.cosim.builder:CoSImQuestionPairsBuilder",
              "builders.cosim.samples:write_cosim_samples", offline_build=OFFLINE_SBERT,
              demo=Demo(models=("baseline:random",))),
    Benchmark("cosim-c", "builders.cosim.builder:CoSImChangePairsBuilder",
              "builders.cosim.samples:write_cosim_samples", offline_build=OFFLINE_SBERT,
              demo=Demo(models=("baseline:random",))),
    Benchmark("pmr-p", "builders.pmr.builder:PMRPairsBuilder", "builders.pmr.samples:write_pmr_samples",
              offline_build=OFFLINE_SBERT, demo=Demo(models=("baseline:random",))),
    Benchmark("vqa-v2", "builders.vqa.v2:VQAv2Builder", "builders.vqa.samples:write_vqa_samples",
              demo=Demo(models=("baseline:prior",))),
    # The demo re-splits the VQA v2 sample (the published VQA-CP files are imported by default).
    Benchmark("vqa-cp", "builders.vqa.cp:VQACPBuilder", "builders.vqa.samples:write_vqa_samples",
              demo=Demo(build=("mode=regenerate",), models=("baseline:prior",),
                        perceptual=(("baseline:prior", "answer_type"),))),
    Benchmark("socialiq", "builders.socialiq.builder:SocialIQBuilder",
              "builders.socialiq.samples:write_socialiq_samples",
              demo=Demo(models=("baseline:majority", "baseline:answer-sentiment"),
                        perceptual=(("baseline:answer-sentiment", None),))),
    Benchmark("visdial", "builders.visdial.builder:VisDialBuilder", "builders.visdial.samples:write_visdial_samples",
              demo=Demo(models=("baseline:random",))),
    Benchmark("disco", "builders.disco.builder:DiscoBuilder", "builders.disco.samples:write_disco_samples",
              demo=Demo(models=("baseline:mean",))),
    # No task: the demo measures it with CounterBias (pipelines/demo.py).
    Benchmark("vl-bias", "builders.vl_bias.builder:VLBiasBuilder", "builders.vl_bias.samples:write_vl_bias_samples"),
)
_BY_NAME = {b.name: b for b in BENCHMARKS}


def benchmarks() -> tuple[Benchmark, ...]:
    """Every registered benchmark, in registration order (the built-in ones, then `register`ed ones)."""
    return BENCHMARKS


def register(benchmark: Benchmark) -> None:
    """Add a benchmark kept outside this package (a plug-in, a test's throwaway entry): every command
    finds it by name from then on, as a built-in one."""
    global BENCHMARKS
    if benchmark.name in _BY_NAME:
        raise ParamsError(f"benchmark '{benchmark.name}' is registered already")
    BENCHMARKS = (*BENCHMARKS, benchmark)
    _BY_NAME[benchmark.name] = benchmark


def builder_names() -> list[str]:
    return sorted(_BY_NAME)


def get_benchmark(name: str) -> Benchmark:
    if name not in _BY_NAME:
        raise ParamsError(f"unknown benchmark '{name}'; known: {', '.join(builder_names())}")
    return _BY_NAME[name]


def get_builder(name: str):
    """An instance of the builder registered under `name`."""
    bench = get_benchmark(name)
    return bench.load(bench.builder)()

