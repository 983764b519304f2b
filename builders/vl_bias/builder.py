"""VL-Bias (Zhang, Wang, Sang, *Counterfactually Measuring and Eliminating Social Bias in
Vision-Language Pre-training Models*, ACM MM 2022, §4.1, Table 1): one row per
annotated image x caption template, with the factual caption (the annotated gender word in the
template, the target [MASK]ed), the counterfactual caption (the gender word swapped, the paper's
L_cf), the target word and type, and the bias prompt of Eq. 2. Images are embedded as they are."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from builders.base import Builder
from builders.result import BuildResult, RunStage, run_uncached
from builders.splits import check_splits
from builders.vl_bias import reader as vl_bias
from builders.vl_bias.words import BIAS_PROMPT, GENDER_PAIRS, MASK, TARGETS, TEMPLATES, parse_gender_pairs
from core.errors import ParamsError
from core.figures import FigureSpec
from core.markdown import table
from core.params import param

SPLIT = "test"


@dataclass(frozen=True)
class VLBiasParams:
    """Defaults: Table 1's four templates, the authors' gender pairs and bias prompt."""

    templates: tuple[str, ...] = param(tuple(TEMPLATES), "caption templates of Table 1")
    gender_pairs: tuple[str, ...] = param(GENDER_PAIRS, "MALE:FEMALE word pairs swapped by counterfactual captions")
    bias_prompt: str = param(BIAS_PROMPT, "the prompt whose [MASK] measures the bias concept (Eq. 2)")

    def __post_init__(self):
        unknown = [t for t in self.templates if t not in TEMPLATES]
        if not self.templates or unknown or len(set(self.templates)) != len(self.templates):
            raise ParamsError(f"templates={','.join(self.templates)}: expected distinct names among "
                              f"{', '.join(TEMPLATES)}")
        try:
            parse_gender_pairs(self.gender_pairs)
        except ValueError as exc:
            raise ParamsError(f"gender_pairs: {exc}") from None
        if self.bias_prompt.count(MASK) != 1:
            raise ParamsError(f"bias_prompt '{self.bias_prompt}': expected exactly one {MASK}")

    @property
    def genders(self) -> dict[str, tuple[str, str]]:
        return parse_gender_pairs(self.gender_pairs)


def features():
    from datasets import Features, Image, Value

    string = Value("string")
    return Features({name: string for name in (
        "id", "instance_id", "image_id")} | {"image": Image()} | {name: string for name in (
            "target", "target_type", "gender", "gender_class", "counterfactual_gender", "template", "caption",
            "counterfactual_caption", "bias_prompt")})


def rows(samples: list[vl_bias.Sample], params: VLBiasParams) -> pa.Table:
    """Rows sorted by (target type, target, image, template order): independent of the input order."""
    genders = params.genders
    cols: dict[str, list] = {name: [] for name in features()}
    for s in sorted(samples, key=lambda s: (s.target_type, s.target, s.image_id)):
        image = {"bytes": vl_bias.read_image(s), "path": Path(s.image_id).name}
        swapped, side = genders[s.gender]
        instance = f"{s.target}:{s.image_id}"
        for key in params.templates:
            template = TEMPLATES[key]
            for name, value in (("id", f"{instance}:{key}"), ("instance_id", instance), ("image_id", s.image_id),
                                ("image", image), ("target", s.target), ("target_type", s.target_type),
                                ("gender", s.gender), ("gender_class", side), ("counterfactual_gender", swapped),
                                ("template", key), ("caption", template.caption(s.gender)),
                                ("counterfactual_caption", template.caption(swapped)),
                                ("bias_prompt", params.bias_prompt)):
                cols[name].append(value)
    return pa.table(cols, schema=features().arrow_schema)


def samples_of(sources: dict, params: VLBiasParams) -> list[vl_bias.Sample]:
    """The samples behind `locate_sources`' files (the annotation file, or paths in the folder layout)."""
    if "annotations" in sources:
        return vl_bias.read_annotations(sources["annotations"], params.genders)
    out = []
    for path in sources["images"]:
        type_, target, gender = (p.lower() for p in path.parts[-4:-1])
        out.append(vl_bias.Sample(path.relative_to(path.parents[3]).as_posix(), path, target, type_, gender))
    return out


class VLBiasBuilder(Builder):
    name = "vl-bias"
    params_class = VLBiasParams
    configs = ("default",)
    default_config = "default"
    splits = (SPLIT,)
    source_dir = "vl_bias"
    card_template = "vl_bias.md"
    description = "VL-Bias (Zhang et al. 2022): gendered image-caption pairs of 52 activities and 13 occupations"
    sources_help = ("{activity,occupation}/<target>/<gender>/<image>, or annotations.csv/.jsonl "
                    "(image, target, target_type, gender)")

    def locate_sources(self, source: Path, splits: list[str], params: VLBiasParams | None = None) -> dict:
        check_splits(self.name, splits, self.splits)
        params = params or VLBiasParams()
        annotation, samples = vl_bias.locate(Path(source), params.genders)
        images = tuple(sorted({s.path for s in samples}))
        return {"annotations": annotation, "images": images} if annotation else {"images": images}

    def check_invariants(self, tables, params: dict) -> list[str]:
        t = tables["default"][SPLIT]
        problems = []
        per_instance = t.group_by("instance_id").aggregate([("template", "count")]).column("template_count")
        counts = set(per_instance.to_pylist())
        if len(counts) > 1 or (counts and counts != {len(params["templates"])}):
            problems.append(f"{SPLIT}: instances do not all have one row per template")
        for caption, cf in zip(t.column("caption").to_pylist(), t.column("counterfactual_caption").to_pylist()):
            if caption.count(MASK) != 1 or cf.count(MASK) != 1 or caption == cf:
                problems.append(f"{SPLIT}: caption '{caption}' / '{cf}' is not a masked counterfactual pair")
                break
        return problems

    def build(self, sources: dict, params: VLBiasParams, run_stage: RunStage = run_uncached) -> BuildResult:
        key = {"templates": list(params.templates), "gender_pairs": list(params.gender_pairs),
               "bias_prompt": params.bias_prompt}
        inputs = ([sources["annotations"]] if "annotations" in sources else []) + list(sources["images"])
        t = run_stage("rows", key, inputs, lambda: {"rows": rows(samples_of(sources, params), params)})["rows"]
        stats = statistics(t, params)
        return BuildResult(tables={"default": {SPLIT: t}}, features=features(), statistics=stats,
                           card_fields=card_fields(stats, params), figures=[counts_figure(stats, params)])


def _gender_order(params: VLBiasParams) -> list[str]:
    return [w for pair in params.gender_pairs for w in (p.strip().lower() for p in pair.split(":"))]


def statistics(t: pa.Table, params: VLBiasParams) -> dict:
    """Instances (image x target) per target and gender, images, rows; templates multiply the rows."""
    first = t.filter(pc.equal(t.column("template"), params.templates[0]))
    per_target: dict[str, dict[str, int]] = {}
    per_gender = {g: 0 for g in _gender_order(params)}
    per_type: dict[str, int] = {}
    for type_, target, gender in zip(*(first.column(c).to_pylist() for c in ("target_type", "target", "gender"))):
        counts = per_target.setdefault(f"{type_}/{target}", {g: 0 for g in per_gender})
        counts[gender] += 1
        per_gender[gender] += 1
        per_type[type_] = per_type.get(type_, 0) + 1
    return {"splits": {SPLIT: {"rows": t.num_rows, "instances": first.num_rows,
                               "images": pc.count_distinct(t.column("image_id")).as_py(),
                               "templates": list(params.templates), "per_type": dict(sorted(per_type.items())),
                               "per_gender": per_gender, "per_target": dict(sorted(per_target.items()))}}}


def card_fields(stats: dict, params: VLBiasParams) -> dict[str, str]:
    s = stats["splits"][SPLIT]
    genders = list(s["per_gender"])
    targets = [[key.split("/")[1], key.split("/")[0], *counts.values(), sum(counts.values())]
               for key, counts in s["per_target"].items()]
    missing = [f"{t} ({type_})" for type_, words in TARGETS.items() for t in words
               if f"{type_}/{t}" not in s["per_target"]]
    return {
        "statistics": table(["Split", "Images", "Instances (image x target)", "Rows (x templates)", "Activities",
                             "Occupations"],
                            [[SPLIT, s["images"], s["instances"], s["rows"], s["per_type"].get("activity", 0),
                              s["per_type"].get("occupation", 0)]]),
        "per_gender": table(["Gender word", "Instances"], [[g, n] for g, n in s["per_gender"].items()]),
        "per_target": table(["Target", "Type", *genders, "Total"], targets),
        "missing_targets": (f"Targets of the VL-Bias lists without an image in this build: {', '.join(missing)}."
                            if missing else "Every target of the two VL-Bias lists has images in this build."),
        "templates": table(["Template", "Table 2 row", "Text"],
                           [[k, TEMPLATES[k].label, f"`{TEMPLATES[k].text}`"] for k in params.templates]),
        "gender_pairs": ", ".join(f"{p.split(':')[0]} <-> {p.split(':')[1]}" for p in params.gender_pairs),
        "bias_prompt": params.bias_prompt,
    }


def counts_figure(stats: dict, params: VLBiasParams) -> FigureSpec:
    s = stats["splits"][SPLIT]
    names = [key.split("/")[1] for key in s["per_target"]]
    return FigureSpec("instances_per_target.png", "VL-Bias instances per target and gender", names,
                      {g: [float(c[g]) for c in s["per_target"].values()] for g in s["per_gender"]},
                      xlabel="target", ylabel="instances")
