"""VL-Bias (Zhang, Wang, Sang, *Counterfactually Measuring and Eliminating Social Bias in
Vision-Language Pre-training Models*, ACM MM 2022, §4.1, Table 1): one row per
annotated image x caption template, with the factual caption (the annotated bias word -- a gender
word -- in the template, the target [MASK]ed), the counterfactual caption (the bias word swapped, the
paper's L_cf), the target word and type, and the bias prompt of Eq. 2. Images are embedded as they
are. Other concept pairs (§6, Fig. 9) build the same way from their own pairs, side names, target lists
and templates."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from builders.base import Builder
from builders.result import BuildResult, RunStage, run_uncached
from builders.splits import check_splits
from builders.vl_bias import reader as vl_bias
from builders.vl_bias.words import (
    BIAS_PROMPT,
    GENDER_CLASSES,
    GENDER_PAIRS,
    MASK,
    TARGETS,
    TEMPLATES,
    parse_bias_pairs,
    template,
)
from core.errors import ParamsError
from core.figures import FigureSpec
from core.markdown import table
from core.params import param

SPLIT = "test"


@dataclass(frozen=True)
class VLBiasParams:
    """Defaults: Table 1's four templates, the authors' gender pairs (B0 = male) and bias prompt, the
    release's 52 activities and 13 occupations."""

    templates: tuple[str, ...] = param(tuple(TEMPLATES), "caption templates: Table 1 names, or texts with one "
                                                         "{bias} and one [MASK]")
    bias_pairs: tuple[str, ...] = param(GENDER_PAIRS, "B0:B1 word pairs swapped by counterfactual captions")
    bias_classes: tuple[str, ...] = param(GENDER_CLASSES, "names of the B0 and B1 sides of the pairs")
    target_lists: str = param("vl-bias", "vl-bias (the 52 activities, 13 occupations) or annotations (the "
                                         "source's own targets: another concept pair)")
    bias_prompt: str = param(BIAS_PROMPT, "the prompt whose [MASK] measures the bias concept (Eq. 2)")

    def __post_init__(self):
        try:
            keys = [template(t).key for t in self.templates]
            parse_bias_pairs(self.bias_pairs)
        except ValueError as exc:
            raise ParamsError(f"{'bias_pairs' if 'pair' in str(exc) or 'bias word' in str(exc) else 'templates'}: "
                              f"{exc}") from None
        if not keys or len(set(keys)) != len(keys):
            raise ParamsError(f"templates={','.join(self.templates)}: expected distinct templates")
        if len(self.bias_classes) != 2 or len(set(self.bias_classes)) != 2 or \
                not all(c.replace("-", "").isalpha() for c in self.bias_classes):
            raise ParamsError(f"bias_classes={','.join(self.bias_classes)}: expected two different names (B0,B1)")
        if self.target_lists not in ("vl-bias", "annotations"):
            raise ParamsError(f"target_lists={self.target_lists}: expected vl-bias or annotations")
        if self.bias_prompt.count(MASK) != 1:
            raise ParamsError(f"bias_prompt '{self.bias_prompt}': expected exactly one {MASK}")

    @property
    def bias_words(self) -> dict[str, tuple[str, str]]:
        """{bias word: (its counterfactual word, its side's class)}."""
        return parse_bias_pairs(self.bias_pairs, tuple(self.bias_classes))


def features():
    from datasets import Features, Image, Value

    string = Value("string")
    return Features({name: string for name in (
        "id", "instance_id", "image_id")} | {"image": Image()} | {name: string for name in (
            "target", "target_type", "bias_word", "bias_class", "counterfactual_bias_word", "template", "caption",
            "counterfactual_caption", "bias_prompt")})


def rows(samples: list[vl_bias.Sample], params: VLBiasParams) -> pa.Table:
    """Rows sorted by (target type, target, image, template order): independent of the input order."""
    words = params.bias_words
    cols: dict[str, list] = {name: [] for name in features()}
    for s in sorted(samples, key=lambda s: (s.target_type, s.target, s.image_id)):
        image = {"bytes": vl_bias.read_image(s), "path": Path(s.image_id).name}
        swapped, side = words[s.bias_word]
        instance = f"{s.target}:{s.image_id}"
        for name_ in params.templates:
            t = template(name_)
            for name, value in (("id", f"{instance}:{t.key}"), ("instance_id", instance), ("image_id", s.image_id),
                                ("image", image), ("target", s.target), ("target_type", s.target_type),
                                ("bias_word", s.bias_word), ("bias_class", side),
                                ("counterfactual_bias_word", swapped),
                                ("template", t.key), ("caption", t.caption(s.bias_word)),
                                ("counterfactual_caption", t.caption(swapped)),
                                ("bias_prompt", params.bias_prompt)):
                cols[name].append(value)
    return pa.table(cols, schema=features().arrow_schema)


def samples_of(sources: dict, params: VLBiasParams) -> list[vl_bias.Sample]:
    """The samples behind `locate_sources`' files (the annotation file, or paths in the folder layout)."""
    if "annotations" in sources:
        return vl_bias.read_annotations(sources["annotations"], params.bias_words, params.target_lists == "vl-bias")
    out = []
    for path in sources["images"]:
        type_, target, word = (p.lower() for p in path.parts[-4:-1])
        out.append(vl_bias.Sample(path.relative_to(path.parents[3]).as_posix(), path, target, type_, word))
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
                    "(image, target, target_type, gender or bias)")

    def locate_sources(self, source: Path, splits: list[str], params: VLBiasParams | None = None) -> dict:
        check_splits(self.name, splits, self.splits)
        params = params or VLBiasParams()
        annotation, samples = vl_bias.locate(Path(source), params.bias_words, params.target_lists == "vl-bias")
        images = tuple(sorted({s.path for s in samples}))
        return {"annotations": annotation, "images": images} if annotation else {"images": images}

    def table_features(self, config: str):
        return features()

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
        key = {"templates": list(params.templates), "bias_pairs": list(params.bias_pairs),
               "bias_classes": list(params.bias_classes), "target_lists": params.target_lists,
               "bias_prompt": params.bias_prompt}
        inputs = ([sources["annotations"]] if "annotations" in sources else []) + list(sources["images"])
        t = run_stage("rows", key, inputs, lambda: {"rows": rows(samples_of(sources, params), params)})["rows"]
        stats = statistics(t, params)
        return BuildResult(tables={"default": {SPLIT: t}}, features=features(), statistics=stats,
                           card_fields=card_fields(stats, params), figures=[counts_figure(stats, params)])


def _word_order(params: VLBiasParams) -> list[str]:
    return [w for pair in params.bias_pairs for w in (p.strip().lower() for p in pair.split(":"))]


def statistics(t: pa.Table, params: VLBiasParams) -> dict:
    """Instances (image x target) per target and bias word, images, rows; templates multiply the rows."""
    first = t.filter(pc.equal(t.column("template"), template(params.templates[0]).key))
    per_target: dict[str, dict[str, int]] = {}
    per_word = {w: 0 for w in _word_order(params)}
    per_type: dict[str, int] = {}
    for type_, target, word in zip(*(first.column(c).to_pylist() for c in ("target_type", "target", "bias_word"))):
        counts = per_target.setdefault(f"{type_}/{target}", {w: 0 for w in per_word})
        counts[word] += 1
        per_word[word] += 1
        per_type[type_] = per_type.get(type_, 0) + 1
    return {"splits": {SPLIT: {"rows": t.num_rows, "instances": first.num_rows,
                               "images": pc.count_distinct(t.column("image_id")).as_py(),
                               "templates": [template(n).key for n in params.templates],
                               "per_type": dict(sorted(per_type.items())),
                               "per_bias_word": per_word, "per_target": dict(sorted(per_target.items()))}}}


def card_fields(stats: dict, params: VLBiasParams) -> dict[str, str]:
    s = stats["splits"][SPLIT]
    words = list(s["per_bias_word"])
    types = list(TARGETS) if params.target_lists == "vl-bias" else list(s["per_type"])
    targets = [[key.split("/")[1], key.split("/")[0], *counts.values(), sum(counts.values())]
               for key, counts in s["per_target"].items()]
    missing = [f"{t} ({type_})" for type_, names in TARGETS.items() for t in names
               if f"{type_}/{t}" not in s["per_target"]]
    pairs = ", ".join(f"{p.split(':')[0]} <-> {p.split(':')[1]}" for p in params.bias_pairs)
    gender = params.target_lists == "vl-bias" and tuple(params.bias_classes) == GENDER_CLASSES
    about = ("Gendered image-caption pairs for measuring social bias in vision-language pre-training (VLP) models "
             "(Zhang, Wang, Sang. *Counterfactually Measuring and Eliminating Social Bias in Vision-Language "
             "Pre-training Models*, ACM MM 2022, §4.1): images of people doing one of 52 activities or working in "
             "one of 13 occupations, annotated with a gender word, each paired with captions from the templates "
             "of the paper's Table 1 with the activity or occupation masked." if gender else
             f"Image-caption pairs in the VL-Bias format for another concept pair (Zhang, Wang, Sang, ACM MM 2022, "
             f"§6, Fig. 9): each image is annotated with a target ({', '.join(types)}) and a bias word ({pairs}; "
             f"sides {params.bias_classes[0]} and {params.bias_classes[1]}), each paired with captions from the "
             f"templates below with the target masked. The gender-specific notes further down describe the "
             f"original VL-Bias, not this build.")
    return {
        "about": about,
        "statistics": table(["Split", "Images", "Instances (image x target)", "Rows (x templates)",
                             *(f"{t.capitalize()} targets" for t in types)],
                            [[SPLIT, s["images"], s["instances"], s["rows"],
                              *(s["per_type"].get(t, 0) for t in types)]]),
        "per_bias_word": table(["Bias word", "Side", "Instances"],
                               [[w, params.bias_words[w][1], n] for w, n in s["per_bias_word"].items()]),
        "per_target": table(["Target", "Type", *words, "Total"], targets),
        "missing_targets": ("Targets are the source's own (`target_lists=annotations`)."
                            if params.target_lists == "annotations" else
                            f"Targets of the VL-Bias lists without an image in this build: {', '.join(missing)}."
                            if missing else "Every target of the two VL-Bias lists has images in this build."),
        "templates": table(["Template", "Table 2 row", "Text"],
                           [[t.key, t.label, f"`{t.text}`"] for t in map(template, params.templates)]),
        "bias_pairs": pairs,
        "bias_classes": f"{params.bias_classes[0]} (B0 of Eq. 7: positive biases lean towards it) and "
                        f"{params.bias_classes[1]}",
        "bias_prompt": params.bias_prompt,
    }


def counts_figure(stats: dict, params: VLBiasParams) -> FigureSpec:
    s = stats["splits"][SPLIT]
    names = [key.split("/")[1] for key in s["per_target"]]
    return FigureSpec("instances_per_target.png", "VL-Bias instances per target and bias word", names,
                      {w: [float(c[w]) for c in s["per_target"].values()] for w in s["per_bias_word"]},
                      xlabel="target", ylabel="instances")
