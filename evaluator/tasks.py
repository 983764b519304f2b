"""Every benchmark's scoring, declared once: the evaluator's half of the registry. A `TaskEntry` names
(as a "module:factory" string, imported on first use so that `vlbench --help` stays instant) the
benchmark's evaluation task, or why it has none and how it is measured instead, and the report card's
family it is drawn in. The builders' half, `builders.registry`, names how it is built; the two are
joined by the benchmark's name. `vlbench predict`, `evaluate`, `perceptual`, `compare`, `leaderboard`,
`shortcuts`, `export-task`, `suite` and the tests read this table; a benchmark kept outside the package
calls `register_task` beside `builders.registry.register`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from core.errors import ParamsError


@dataclass(frozen=True)
class TaskEntry:
    benchmark: str  # the name it has in builders.registry
    task: str | None = None  # "module:factory" of its evaluator.base.Task; None: measured another way
    no_task_reason: str = ""  # what to run instead when there is no task
    counterbias: bool = False  # its build is what CounterBias (Zhang, Wang, Sang, ACM MM 2022) measures a model on
    family: str = ""  # the report card draws the headline metrics of one family in one figure


# The benchmark families of the report card's figures.
OOD_GQA = "GQA-OOD: rare and frequent answers"
PRIORS = "VQA v2 and VQA-CP: changing priors"
COMMONSENSE = "VCR and the paired benchmarks"
MODALITIES = "Social-IQ, VisDial, DISCO: several modalities"
SOCIAL_BIAS = "VL-Bias: social bias"

TASKS: tuple[TaskEntry, ...] = (
    TaskEntry("gqa-ood", "evaluator.gqa_ood.task:GQAOODTask", family=OOD_GQA),
    TaskEntry("vcr-visor", "evaluator.vcr_visor.task:VCRVisorTask", family=COMMONSENSE),
    TaskEntry("vcr", "evaluator.vcr.task:VCRTask", family=COMMONSENSE),
    TaskEntry("cosim-q", "evaluator.cosim.task:CoSImQuestionTask", family=COMMONSENSE),
    TaskEntry("cosim-c", "evaluator.cosim.task:CoSImChangeTask", family=COMMONSENSE),
    TaskEntry("pmr-p", "evaluator.pmr.task:PMRPairsTask", family=COMMONSENSE),
    TaskEntry("vqa-v2", "evaluator.vqa.task:vqa_v2_task", family=PRIORS),
    TaskEntry("vqa-cp", "evaluator.vqa.task:vqa_cp_task", family=PRIORS),
    TaskEntry("socialiq", "evaluator.socialiq.task:SocialIQTask", family=MODALITIES),
    TaskEntry("visdial", "evaluator.visdial.task:VisDialTask", family=MODALITIES),
    TaskEntry("disco", "evaluator.disco.task:DiscoTask", family=MODALITIES),
    TaskEntry("vl-bias", no_task_reason="measure a model's social bias with `vlbench counterbias --data DIR "
              "--model SPEC`", counterbias=True, family=SOCIAL_BIAS),
)
_BY_NAME = {t.benchmark: t for t in TASKS}


def task_entries() -> tuple[TaskEntry, ...]:
    """Every benchmark's entry, in registration order (the built-in ones, then `register_task`ed ones)."""
    return TASKS


def register_task(entry: TaskEntry) -> None:
    """Add the scoring of a benchmark kept outside this package (registered with
    `builders.registry.register`): every command finds it by name from then on."""
    global TASKS
    if entry.benchmark in _BY_NAME:
        raise ParamsError(f"benchmark '{entry.benchmark}' has a task entry already")
    if entry.counterbias and counterbias_benchmarks():
        raise ParamsError(f"benchmark '{entry.benchmark}': the suite's CounterBias row measures one benchmark, "
                          f"{counterbias_benchmarks()[0]}, already")
    TASKS = (*TASKS, entry)
    _BY_NAME[entry.benchmark] = entry


def get_task_entry(name: str) -> TaskEntry:
    if name not in _BY_NAME:
        from builders.registry import get_benchmark

        get_benchmark(name)  # an unknown name: the error lists the benchmarks
        raise ParamsError(f"{name} has no task entry (evaluator.tasks.register_task)")
    return _BY_NAME[name]


def has_task(name: str) -> bool:
    """Whether the benchmark has an evaluation task (predict, evaluate, perceptual...)."""
    return name in _BY_NAME and _BY_NAME[name].task is not None


def task_names() -> list[str]:
    """The benchmarks with an evaluation task, in registration order."""
    return [t.benchmark for t in TASKS if t.task is not None]


def counterbias_benchmarks() -> list[str]:
    """The benchmark whose build CounterBias measures a model on (the suite's CounterBias row), as a list of
    at most one (`register_task` refuses a second)."""
    return [t.benchmark for t in TASKS if t.counterbias]


def get_task(name: str):
    """The evaluation task of `name` (one without a task: its reason says what to run instead)."""
    entry = get_task_entry(name)
    if entry.task is None:
        raise ParamsError(f"{name} has no prediction file or perceptual score: {entry.no_task_reason}")
    module, _, factory = entry.task.partition(":")
    return getattr(importlib.import_module(module), factory)()
