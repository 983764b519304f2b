"""The evaluation contract of a benchmark: a `Task` subclass declares its submission format, its
metrics and its models; every scoring command (`predict`, `evaluate`, `compare`, `leaderboard`,
`perceptual`, `suite`, `export-task` and the harness logs read back) calls only these hooks.

Required: the class attributes below without a default, and `ids`, `predictions_file`,
`per_sample`, `score`, `report`. Optional (defaults here): scoring options (`options_class`), the
majority vote of the perceptual score (`majority`), where its training rows come from
(`training_table`), benchmark-specific perceptual analyses (`perceptual_extras`), its model menu
(`baselines`, `hf_families`: evaluator/models/menu.py), whether `features:<folder>` heads apply
(`feature_heads`), how a generative VLM is asked (`generative`, an `evaluator.models.ask.Ask`: `hf:`,
`vllm:` and `openai:` models, the exported harness tasks), and where an lmms-eval task's docs come from
(`harness_split`, a `HarnessSplit`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import pyarrow as pa

from evaluator.models.ask import Ask
from evaluator.models.menu import Baseline, HfFamily, menu_entry
from evaluator.models.options import ModelOptions
from evaluator.submission import Coverage


@dataclass(frozen=True)
class Modality:
    """A modality of a benchmark (`Task.modalities`, what the perceptual score permutes: Gat et al., NeurIPS 2021,
    §3): the columns that move together when it is permuted; the first names its content (feature files are keyed
    by it)."""

    name: str
    columns: tuple[str, ...]


def _same(answer: str) -> str:
    return answer


@dataclass(frozen=True)
class PriorRule:
    """How a benchmark measures the prior-following rate (`Task.prior_rule`; evaluator/prior_following.py)."""

    baseline: str  # the task's `baseline:<name>` whose answer is the training prior
    metric: str  # the per-row metric of `Task.per_sample` whose 0 marks an error
    prior: str  # the prior in words, with its paper (reports and the card)
    normalise: Callable[[str], str] = _same  # an answer in the form the metric compares
    parts: str | None = None  # a column: the rate also on each of its values


@dataclass(frozen=True)
class HarnessSplit:
    """Where an lmms-eval task's docs come from, in lmms-lab's Hub layout (a Task's `harness_split`, read by
    evaluator/interop.py): the dataset's `config` (None: the default one) and `split`, the column with the
    benchmark's id, the question column (found in a sample's `input`) and the `target` column (None when the
    task's target is not a column)."""

    config: str | None
    split: str
    id_column: str
    question_column: str
    target_column: str | None = None


@dataclass(frozen=True)
class Headline:
    """One headline metric: its label, its key in `score`'s dict, its direction, its scale and the rows it
    reads. The demo prints the headline metrics, leaderboards list them, and the Hub's eval.yaml makes a task
    of each one where higher is better (a Hub leaderboard ranks descending), over `config` where the metric
    reads just that config's rows (GQA-OOD's acc-tail: the `tail` config)."""

    label: str
    key: str
    higher_is_better: bool = True
    scale: str = "%"  # how its value is written: "%" (0 to 100) or "0-1" (a fraction, VisDial's MRR)
    config: str | None = None  # the built config holding exactly the rows it reads (None: every row it is given)

    @property
    def scale_words(self) -> str:
        return {"%": "in %", "0-1": "from 0 to 1"}[self.scale]


@dataclass(frozen=True)
class Sealing:
    """What a participant sees of a split sealed for a hidden challenge (`vlbench seal`, evaluator/sealed.py): the
    columns of the task's config kept in the public half (every other column -- answers, labels, counts, a
    metric's truth, a statistic computed from them -- goes into the sealed answer file), with the release it
    follows (`source`). `opaque_ids`: the benchmark's ids (or its row order) give answers away, so the public half
    names each row by a keyed hash of its id, in the order of those hashes. `one_row_per`: a column whose value a
    sealed split holds once (VisDial: a later round's history holds the earlier rounds' answers), why, and the
    `--param` that builds such a split (`build_param`)."""

    public: tuple[str, ...]
    source: str
    opaque_ids: bool = False
    one_row_per: str | None = None
    one_row_why: str = ""
    build_param: str | None = None


class Task(ABC):
    name: ClassVar[str]
    config: ClassVar[str]  # the built config the task reads
    default_split: ClassVar[str]  # the split scored when --split is not given
    id_field: ClassVar[str | tuple[str, ...]]  # the submission's id field(s)
    value_field: ClassVar[str | tuple[str, ...]]  # the submission's prediction field(s)
    id_type: ClassVar[type]
    # wrap with staticmethod in the subclass; a tuple of one check per field where `value_field` is a tuple
    value_check: ClassVar[Callable[[Any], bool] | tuple[Callable[[Any], bool], ...]]
    value_desc: ClassVar[str]  # what value_check accepts, for error messages
    metric_labels: ClassVar[dict[str, str]]  # per-sample metric -> table label (perceptual report)
    layout: ClassVar[str]  # perceptual report layout: "by-subset" or "by-model"
    modalities: ClassVar[tuple] = ()  # perceptual-score modalities (`Modality`, above)
    options_class: ClassVar[type | None] = None  # scoring options set with `evaluate --option KEY=VALUE`
    feature_heads: ClassVar[bool] = False  # `features:<folder>` heads fitted on the train split
    generative: ClassVar[Ask | None] = None  # how a generative VLM is asked (None: it cannot answer)
    baselines: ClassVar[tuple[Baseline, ...]] = ()  # the task's `baseline:<name>` models
    hf_families: ClassVar[tuple[HfFamily, ...]] = ()  # the non-generative `hf:` checkpoints it loads
    generative_reason: ClassVar[str] = "the benchmark declares no way to ask a generative model"
    headline: ClassVar[tuple[Headline, ...]] = ()  # the metrics a reader looks at first
    sealing: ClassVar[Sealing | None] = None  # how a split is sealed for a hidden challenge (None: it cannot be)
    images_folder: ClassVar[str | None] = None  # its image folder under `vlbench suite --images-root`
    # the prior-following rate's rule: which baseline is the training prior, what marks an error; None: the
    # benchmark has no answer prior to follow
    prior_rule: ClassVar[PriorRule | None] = None
    # The majority-vote model of Gat et al., NeurIPS 2021, Eq. 4: a task that has one defines
    # `majority(self, train) -> model`; None (the default, and a task may say so explicitly): it has none.
    majority: ClassVar[Callable | None] = None

    @property
    def has_majority(self) -> bool:
        return type(self).majority is not None

    # -- submissions and metrics --------------------------------------------------------------
    @abstractmethod
    def ids(self, table: pa.Table) -> list:
        """The submission ids of the split's rows, in row order."""

    @abstractmethod
    def predictions_file(self, table: pa.Table, predictions: list) -> list[dict]:
        """A model's per-row predictions as the benchmark's submission entries."""

    @abstractmethod
    def per_sample(self, table: pa.Table, predictions: list, options=None) -> dict:
        """{metric: per-row values} of per-row predictions (the perceptual score averages these)."""

    @abstractmethod
    def score(self, table: pa.Table, predictions: dict, coverage: Coverage, options=None) -> dict:
        """The benchmark's metrics of a validated submission ({id: value}) on the split."""

    @abstractmethod
    def report(self, metrics: dict, title: str) -> tuple[str, list]:
        """report.md text and the plots it links."""

    def clusters(self, table: pa.Table):
        """(per-row cluster code, what a cluster is): rows that are not independent -- one image's
        questions, one pair's sub-questions -- and are resampled together by the bootstrap. None: no
        intervals for this benchmark yet."""
        return None

    def resampling(self, table: pa.Table, predictions: dict, options=None):
        """The headline metrics of `score` as ratios over the scored rows, with the clusters the
        bootstrap resamples (evaluator.stats.bootstrap.Resampling; metric names are paths into score's dict,
        e.g. `by_type.causal.apq`), for confidence intervals and paired comparisons. None: no
        intervals for this benchmark yet."""
        return None

    label_source: ClassVar[str | None] = None  # the benchmark whose examples this one's rows are made of
    # Other harnesses' outputs this benchmark reads (evaluator.interop): format -> its task / dataset
    # names, and the fields of their samples that may hold this benchmark's id.
    harness_tasks: ClassVar[dict[str, tuple[str, ...]]] = {}
    harness_id_fields: ClassVar[tuple[str, ...]] = ()
    harness_split: ClassVar[HarnessSplit | None] = None  # an lmms-eval task's docs (evaluator.interop)

    def source_label_keys(self, table: pa.Table) -> list[tuple]:
        """Per row, (the source example's id, its question kind) whose shortcut labels the row takes
        (`vlbench shortcuts --labels-from`); only where `label_source` is set."""
        raise NotImplementedError(f"{self.name} takes no labels from another benchmark")

    def choice_questions(self, table: pa.Table):
        """{kind: evaluator.shortcuts.labels.ChoiceQuestions} of a multiple-choice benchmark's rows (context,
        candidates, correct index), what `vlbench shortcuts` scores text-only; None: no candidates."""
        return None

    # -- perceptual score ---------------------------------------------------------------------
    def training_table(self, options: ModelOptions) -> pa.Table | None:
        """Rows the majority vote is fitted on when the built folder has no train split (None: use it)."""
        return None

    def perceptual_extras(self, table: pa.Table, train: pa.Table | None, result) -> dict:
        """Benchmark-specific analyses added to the perceptual metrics (VQA: Table 2's token analysis)."""
        return {}

    # -- models -------------------------------------------------------------------------------
    @classmethod
    def model_menu(cls) -> list[str]:
        """The model specs this task takes, for --help and errors: its baselines and `hf:` families, a
        generative VLM where it declares how to ask one, `features:` heads where it fits them, `py:`."""
        return [*(menu_entry(f"baseline:{b.name}", b.note) for b in cls.baselines),
                *(menu_entry(f"hf:<{f.label}>", f.note) for f in cls.hf_families),
                *(["hf:<image-text-to-text VLM>", "vllm:<image-text-to-text VLM>",
                   "openai:<served VLM> (with --base-url)"] if cls.generative is not None else []),
                *(["features:<folder>"] if cls.feature_heads else []), "py:<module>:<factory>"]

    @classmethod
    def models_help(cls) -> str:
        return ", ".join(cls.model_menu())

    def make_model(self, spec: str, options: ModelOptions):
        """The Model of a spec, from the task's menu (resolved in evaluator/models/resolve.py: `py:` for
        every task, `baseline:` and `hf:` as declared, generative VLMs (`hf:`, `vllm:`, `openai:`) where
        `generative` is set, `features:` where `feature_heads`)."""
        from evaluator.models.resolve import make_model

        return make_model(self, spec, options)
