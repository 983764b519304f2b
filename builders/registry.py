"""Every benchmark, declared once. A `Benchmark` names (as "module:attribute" strings, imported on
first use so that `vlbench --help` stays instant) its builder, its evaluation task, the writer of its
sample sources and what `vlbench demo` runs on it; `vlbench list`, `build`, `predict`, `evaluate`,
`perceptual`, `sample-sources`, `demo` and the tests all read this table (through `benchmarks()`). A
new benchmark adds one entry here; one kept elsewhere calls `register`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from builders.model_files import PACKAGED_MINILM
from core.errors import ParamsError


@dataclass(frozen=True)
class Benchmark:
    name: str
    builder: str  # "module:Class" of its builders.base.Builder subclass
    samples: str  # "module:function" writing its raw sample sources (shared by benchmarks of one source)
    task: str | None = None  # "module:factory" of its evaluator.base.Task; None: measured another way
    no_task_reason: str = ""  # what to run instead when there is no task
    offline_build: tuple[str, ...] = ()  # `--param` stand-ins that build it offline (the packaged MiniLM...)
    demo_build: tuple[str, ...] = ()  # further `--param` choices of the demo build
    demo_models: tuple[str, ...] = ()  # model specs the demo predicts and evaluates
    demo_train_file: str | None = None  # their --train-file, under the sample sources' root
    demo_perceptual: tuple[tuple[str, str | None], ...] = ()  # (model spec, --by column) for the demo
    legacy_json: bool = False  # the demo also writes the authors' file format
    family: str = ""  # the report card draws the headline metrics of one family in one figure

    @property
    def demo_params(self) -> list[str]:
        """The `--param` values of the demo build: the offline stand-ins, then the demo's choices."""
        return [*self.offline_build, *self.demo_build]

    def load(self, ref: str):
        module, _, attribute = ref.partition(":")
        return getattr(importlib.import_module(module), attribute)


# The benchmark families of the report card's figures.
OOD_GQA = "GQA-OOD: rare and frequent answers"
PRIORS = "VQA v2 and VQA-CP: changing priors"
COMMONSENSE = "VCR and the paired benchmarks"
MODALITIES = "Social-IQ, VisDial, DISCO: several modalities"
SOCIAL_BIAS = "VL-Bias: social bias"

# Registration order is the demo's order; names are listed sorted elsewhere.
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("gqa-ood", "builders.gqa_ood.builder:GQAOODBuilder", "builders.gqa_ood.samples:write_gqa_samples",
              task="evaluator.gqa_ood.task:GQAOODTask", demo_models=("baseline:prior", "baseline:random"),
              demo_train_file="gqa/train_balanced_questions.json",
              legacy_json=True, family=OOD_GQA),
    # Offline demo: the packaged MiniLM stands in for the recipe's SBERT, no NLI filter.
    Benchmark("vcr-visor", "builders.vcr_visor.builder:VCRVisorBuilder",
              "builders.sources.vcr_samples:write_vcr_samples",
              task="evaluator.vcr_visor.task:VCRVisorTask",
              offline_build=(f"sbert_model={PACKAGED_MINILM}", "nli_model=none"), demo_models=("baseline:random",),
              family=COMMONSENSE),
    Benchmark("vcr", "builders.vcr.builder:VCRBuilder", "builders.sources.vcr_samples:write_vcr_samples",
              task="evaluator.vcr.task:VCRTask", demo_models=("baseline:random", "baseline:overlap"),
              family=COMMONSENSE),
    # COSIM-Q / COSIM-C (the VCR-Visor paper, App. C): the same offline stand-ins as vcr-visor.
    Benchmark("cosim-q", "builders.cosim.builder:CoSImQuestionPairsBuilder",
              "builders.cosim.samples:write_cosim_samples", task="evaluator.cosim.task:CoSImQuestionTask",
              offline_build=(f"sbert_model={PACKAGED_MINILM}", "nli_model=none"), demo_models=("baseline:random",),
              family=COMMONSENSE),
    Benchmark("cosim-c", "builders.cosim.builder:CoSImChangePairsBuilder",
              "builders.cosim.samples:write_cosim_samples", task="evaluator.cosim.task:CoSImChangeTask",
              offline_build=(f"sbert_model={PACKAGED_MINILM}", "nli_model=none"), demo_models=("baseline:random",),
              family=COMMONSENSE),
    Benchmark("pmr-p", "builders.pmr.builder:PMRPairsBuilder", "builders.pmr.samples:write_pmr_samples",
              task="evaluator.pmr.task:PMRPairsTask",
              offline_build=(f"sbert_model={PACKAGED_MINILM}", "nli_model=none"), demo_models=("baseline:random",),
              family=COMMONSENSE),
    Benchmark("vqa-v2", "builders.vqa.v2:VQAv2Builder", "builders.vqa.samples:write_vqa_samples",
              task="evaluator.vqa.task:vqa_v2_task", demo_models=("baseline:prior",), family=PRIORS),
    # The demo re-splits the VQA v2 sample (the published VQA-CP files are imported by default).
    Benchmark("vqa-cp", "builders.vqa.cp:VQACPBuilder", "builders.vqa.samples:write_vqa_samples",
              task="evaluator.vqa.task:vqa_cp_task", demo_build=("mode=regenerate",), demo_models=("baseline:prior",),
              demo_perceptual=(("baseline:prior", "answer_type"),), family=PRIORS),
    Benchmark("socialiq", "builders.socialiq.builder:SocialIQBuilder",
              "builders.socialiq.samples:write_socialiq_samples",
              task="evaluator.socialiq.task:SocialIQTask",
              demo_models=("baseline:majority", "baseline:answer-sentiment"),
              demo_perceptual=(("baseline:answer-sentiment", None),), family=MODALITIES),
    Benchmark("visdial", "builders.visdial.builder:VisDialBuilder", "builders.visdial.samples:write_visdial_samples",
              task="evaluator.visdial.task:VisDialTask", demo_models=("baseline:random",), family=MODALITIES),
    Benchmark("disco", "builders.disco.builder:DiscoBuilder", "builders.disco.samples:write_disco_samples",
              task="evaluator.disco.task:DiscoTask", demo_models=("baseline:mean",), family=MODALITIES),
    Benchmark("vl-bias", "builders.vl_bias.builder:VLBiasBuilder", "builders.vl_bias.samples:write_vl_bias_samples",
              no_task_reason="measure a model's social bias with `vlbench counterbias --data DIR --model SPEC`",
              family=SOCIAL_BIAS),
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


def get_task(name: str):
    """The evaluation task of `name` (vl-bias has none: its reason says what to run instead)."""
    bench = get_benchmark(name)
    if bench.task is None:
        raise ParamsError(f"{name} has no prediction file or perceptual score: {bench.no_task_reason}")
    return bench.load(bench.task)()
