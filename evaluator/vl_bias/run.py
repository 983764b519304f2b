"""`vlbench counterbias`: CounterBias (Zhang, Wang, Sang, ACM MM 2022, §3) of a model on a built VL-Bias split.

Per image: P(B | V_f) and P(B' | V_f) from the bias prompt (Eq. 2), the counterfactual image V_cf by
PGD on that prompt (Eq. 3, cached), P(B | V_cf). Per image x template row: P(T | V, L) at the
caption's [MASK] for (V_f, L_f), (V_cf, L_cf), (V_cf, L_f), (V_f, L_cf) (Eq. 1, 5, 8, 10) and, with no
image (Eq. 12), for L_f and L_cf. Then Eq. 6, 9, 11, 13 per row, Eq. 7 per target and Table 2's cells
(`evaluator.vl_bias.counterbias`). The model is any bias probe (`evaluator.vl_bias.probe`): a masked LM,
a generative VLM, CLIP / SigLIP. The bias concept's words, sides, targets and templates come from the
build (its manifest's parameters), so another concept pair (§6) is measured the same way. Images are
processed in chunks, so memory does not grow with the dataset; all of a chunk's probabilities are asked
in one call, so a model can share an image's work across its templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from builders.vl_bias.words import GENDER_CLASSES, TARGETS, TEMPLATES, template
from core.data import load_table, pick_split, resolve_data
from core.errors import ModelError, ParamsError
from core.manifest import MANIFEST, read_manifest
from evaluator.models.images import open_image
from evaluator.models.options import ModelOptions
from evaluator.vl_bias import counterbias as cb
from evaluator.vl_bias.attack import PGD, CounterfactualCache, pgd_attack
from evaluator.vl_bias.families import load_probe
from evaluator.vl_bias.probe import BiasProbe, pad_images
from evaluator.vl_bias.report import metrics_of, write_counterbias_report

COLUMNS = ("id", "instance_id", "image_id", "image", "target", "target_type", "bias_word", "bias_class",
           "counterfactual_bias_word", "template", "caption", "counterfactual_caption", "bias_prompt")
EXAMPLES = 4  # Fig. 6 instances in the report, half from each side of the bias concept


@dataclass(frozen=True)
class CounterBiasOptions:
    attack: PGD | None = PGD()  # None: no counterfactual images, language measures only
    softmax: str = "full"  # "full" vocabulary (Eq. 1) or "targets": over the target list of the row's type
    b0: str | None = None  # Eq. 7's B0 (positive biases lean towards it); None: the build's B0 side
    min_change: float = 1e-6  # |change of the bias concept| below this: instance bias undefined
    cache: Path | None = None  # counterfactual images; None: no cache
    chunk_images: int = 128
    bias_prompt: str | None = None  # None: the split's (adapted by a generative VLM, evaluator.vl_bias.generative)

    def __post_init__(self):
        if self.softmax not in ("full", "targets"):
            raise ParamsError(f"--softmax {self.softmax}: expected full or targets")
        if not 0 < self.min_change < float("inf"):
            raise ParamsError(f"--min-concept-change {self.min_change}: expected a positive number")
        if self.b0 is not None and not self.b0.replace("-", "").isalpha():
            raise ParamsError(f"--b0 {self.b0}: expected the name of a side of the bias concept (e.g. male)")
        if self.bias_prompt is not None and self.bias_prompt.count("[MASK]") != 1:
            raise ParamsError(f"--bias-prompt '{self.bias_prompt}': expected exactly one [MASK]")


@dataclass(frozen=True)
class Concept:
    """The split's bias concept, from its build parameters and rows: the two sides (B0 first), the word
    pairs, the templates in build order, and per target type the candidate targets (the VL-Bias list of
    the type, with the split's own targets of that type)."""

    classes: tuple[str, str]
    pairs: dict  # bias word -> (B0 word, B1 word) of its pair
    templates: tuple[str, ...]
    labels: dict  # template key -> Table 2 row name
    targets: dict  # target type -> candidate targets (sorted)

    @classmethod
    def of(cls, folder: Path, table: pa.Table) -> "Concept":
        cols = {c: table.column(c).to_pylist() for c in ("template", "bias_word", "counterfactual_bias_word",
                                                          "bias_class", "target_type", "target")}
        # a folder without a manifest (not written by vlbench build) is read with VL-Bias's own parameters
        params = read_manifest(folder).get("params", {}) if (Path(folder) / MANIFEST).is_file() else {}
        classes = tuple(params.get("bias_classes", GENDER_CLASSES))
        present = set(cols["template"])
        chosen = [template(t) for t in params.get("templates", TEMPLATES)]
        templates = tuple(t.key for t in chosen if t.key in present) or tuple(sorted(present))
        labels = {t.key: t.label for t in chosen} | {k: k for k in present if k not in {t.key for t in chosen}}
        pairs = {}
        for word, other, side in zip(cols["bias_word"], cols["counterfactual_bias_word"], cols["bias_class"]):
            pairs[word] = (word, other) if side == classes[0] else (other, word)
        targets: dict[str, set] = {}
        for kind, target in zip(cols["target_type"], cols["target"]):
            targets.setdefault(kind, set(TARGETS.get(kind, ()))).add(target)
        return cls(classes, pairs, templates, labels, {k: tuple(sorted(v)) for k, v in sorted(targets.items())})


class ExampleKeeper:
    """The Fig. 6 examples, chosen while the images stream through `measure`: per side of the bias
    concept, the k/2 rows of the first template with the largest |Eq. 6| bias (ties: the earlier row),
    kept with their V_f and V_cf so that the report needs no second decode or attack."""

    def __init__(self, template_key: str, classes: tuple[str, str], k: int = EXAMPLES):
        self.template, self.k = template_key, k
        self.best: dict[str, list[tuple[float, int]]] = {c: [] for c in classes}
        self.pixels: dict[str, dict] = {}

    def offer(self, rows: list[int], bias: np.ndarray, cols: dict, x_f: dict, x_cf: dict) -> None:
        for r, b in zip(rows, bias):
            side = cols["bias_class"][r]
            if cols["template"][r] == self.template and side in self.best and not np.isnan(b):
                self.best[side].append((-abs(float(b)), r))
        for side in self.best:
            self.best[side] = sorted(self.best[side])[: self.k // 2]
        wanted = {cols["image_id"][r] for side in self.best.values() for _, r in side}
        for r in rows:
            image_id = cols["image_id"][r]
            if image_id in wanted and image_id not in self.pixels:
                self.pixels[image_id] = {"f": x_f[image_id], "cf": x_cf[image_id]}
        self.pixels = {i: p for i, p in self.pixels.items() if i in wanted}

    def rows(self) -> list[int]:
        return [r for side in self.best.values() for _, r in side]


def probabilities(scores: list[np.ndarray], candidates: list[tuple], words: list[str], renormalise) -> np.ndarray:
    """P(word) per query from its candidates' log-scores: the full-vocabulary probability (Eq. 1), or
    renormalised over the query's candidates where `renormalise` (`--softmax targets`, or a probe whose
    scores are relative). Vectorised over the queries that share a candidate list."""
    out = np.zeros(len(scores))
    renormalise = np.broadcast_to(np.asarray(renormalise, dtype=bool), (len(scores),))
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(candidates):
        groups.setdefault(c, []).append(i)
    for cands, idx in groups.items():
        column = {w: j for j, w in enumerate(cands)}
        matrix = np.stack([scores[i] for i in idx])
        index = np.array([column[words[i]] for i in idx], dtype=np.int64)
        full = cb.mask_probability(matrix, index)
        among = np.ones_like(matrix, dtype=bool)
        out[idx] = np.where(renormalise[idx], cb.mask_probability(matrix, index, among), full)
    return out


def _check_table(table: pa.Table, folder: Path) -> None:
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ParamsError(f"{folder}: not a VL-Bias build of this vlbench (no column {missing[0]}; rebuild it)")


def counterfactuals(model, images: dict[str, tuple[bytes, object]], swapped: dict[str, str], pairs: dict,
                    prompt: str, attack: PGD, cache: CounterfactualCache) -> dict:
    """V_cf per image id (Eq. 3): from the cache, else PGD in batches of similar size (less padding),
    minimising the cross-entropy of B' at the bias prompt's mask (full-vocabulary, or over the image's
    bias pair where the probe's scores are relative)."""
    import torch

    out, todo = {}, []
    for image_id, (data, x_f) in images.items():
        key = cache.key(data, model.fingerprint, prompt, swapped[image_id], attack, model.bf16)
        hit = cache.get(key)
        if hit is None:
            todo.append((image_id, key, x_f))
        else:
            out[image_id] = hit
    todo.sort(key=lambda item: (item[2].shape[1], item[2].shape[2], item[0]))
    words = tuple(sorted({w for pair in pairs.values() for w in pair}))
    relative = not model.normalised(prompt)
    for start in range(0, len(todo), model.batch_size):
        batch = todo[start:start + model.batch_size]
        pixels, mask = pad_images([x for _, _, x in batch])
        device = model.device
        pixels, mask = pixels.to(device), mask.to(device)
        objective = model.attack_objective(pixels, mask, prompt, words)
        if relative:  # a probability over the image's own pair
            own = torch.tensor([[w in pairs[swapped[i]] for w in words] for i, _, _ in batch], device=device)
            objective = (lambda f: lambda x: torch.log_softmax(f(x).masked_fill(~own, float("-inf")), dim=-1))(
                objective)
        target_cols = [words.index(swapped[image_id]) for image_id, _, _ in batch]
        adv = pgd_attack(objective, pixels, mask, target_cols, attack)
        for i, (image_id, key, x_f) in enumerate(batch):
            x_cf = adv[i, :, : x_f.shape[1], : x_f.shape[2]].cpu()
            cache.put(key, x_cf)
            out[image_id] = x_cf
    return out


def _decode(model, data: bytes, image_id: str):
    try:
        return model.image_tensor(open_image(data))
    except ModelError as exc:
        raise ModelError(f"image '{image_id}': {str(exc).removeprefix('embedded image: ')}") from None


def _rows_of_images(table: pa.Table) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = {}
    for i, image_id in enumerate(table.column("image_id").to_pylist()):
        rows.setdefault(image_id, []).append(i)
    return rows


class Queries:
    """The distinct (text, image, candidates) questions of a chunk, asked in one `score` call; each row
    reads its answer back by key."""

    def __init__(self):
        self.keys: dict[tuple, int] = {}
        self.items: list[tuple[str, object]] = []
        self.candidates: list[tuple] = []

    def add(self, text: str, image_key, image, candidates: tuple) -> int:
        key = (text, image_key, candidates)
        if key not in self.keys:
            self.keys[key] = len(self.items)
            self.items.append((text, image))
            self.candidates.append(candidates)
        return self.keys[key]

    def ask(self, model: BiasProbe) -> list[np.ndarray]:
        return model.score(self.items, self.candidates) if self.items else []


def measure(table: pa.Table, model: BiasProbe, options: CounterBiasOptions, concept: Concept, progress=None) -> dict:
    """Per-row probabilities and instance biases (numpy columns), per-image attack records, settings."""
    prompts = set(table.column("bias_prompt").to_pylist())
    if len(prompts) > 1:
        raise ParamsError(f"the split has {len(prompts)} different bias prompts; expected one")
    split_prompt = prompts.pop() if prompts else ""
    prompt = options.bias_prompt or model.bias_prompt(split_prompt)
    n = table.num_rows
    cols = {c: np.asarray(table.column(c).to_pylist(), dtype=object) for c in COLUMNS if c != "image"}
    target_sets = [concept.targets[k] for k in cols["target_type"]]
    target_words = list(cols["target"])
    restricted = options.softmax == "targets"

    # Eq. 12-13: no image (a blank one where the model needs an image), factual and counterfactual captions
    blank = model.blank_image() if model.vision else None
    text_queries = Queries()
    asked = {name: [text_queries.add(t, "none", blank, c) for t, c in zip(cols[source], target_sets)]
             for name, source in (("p_t_lf", "caption"), ("p_t_lcf", "counterfactual_caption"))}
    scores = text_queries.ask(model)
    for name, idx in asked.items():
        source = "caption" if name == "p_t_lf" else "counterfactual_caption"
        cols[name] = probabilities([scores[i] for i in idx], target_sets, target_words,
                                   [restricted or not model.normalised(t) for t in cols[source]])
    cols["bias_l_log"] = cb.bias_l_log(cols["p_t_lf"], cols["p_t_lcf"])
    measures, images, keeper = ["l_log"], [], None
    if model.vision:
        measures = ["l"] + measures
        for name in ("p_t_vf_lf", "p_t_vf_lcf", "p_t_vcf_lcf", "p_t_vcf_lf"):
            cols[name] = np.full(n, np.nan)
        if options.attack is not None:
            measures = ["vl", "v"] + measures
            keeper = ExampleKeeper(concept.templates[0], concept.classes) if n else None
        images = _score_images(table, cols, model, options, concept, prompt, target_sets, keeper, progress)
        cols["bias_l"] = cb.bias_l(cols["p_t_vf_lf"], cols["p_t_vf_lcf"])
        if options.attack is not None:
            per_image = {r["image_id"]: r for r in images}
            p_b_vf = np.array([per_image[i]["p_b_vf"] for i in cols["image_id"]])
            p_b_vcf = np.array([per_image[i]["p_b_vcf"] for i in cols["image_id"]])
            cols["p_b_vf"], cols["p_b_vcf"] = p_b_vf, p_b_vcf
            cols["bias_vl"] = cb.bias_vl(cols["p_t_vf_lf"], cols["p_t_vcf_lcf"], p_b_vf, p_b_vcf, options.min_change)
            cols["bias_v"] = cb.bias_v(cols["p_t_vf_lf"], cols["p_t_vcf_lf"], p_b_vf, p_b_vcf, options.min_change)
    examples = {"rows": keeper.rows(), "pixels": keeper.pixels} if keeper else {"rows": [], "pixels": {}}
    words = sorted({w for ts in concept.targets.values() for w in ts} | set(concept.pairs))
    return {"columns": cols, "measures": measures, "images": images, "prompt": prompt, "examples": examples,
            "blank_image": blank is not None,
            "notes": model.notes(words), "concept": concept,
            "relative": sorted({t for t in set(cols["caption"]) | set(cols["counterfactual_caption"]) | {prompt}
                                if not model.normalised(t)})}


def _score_images(table, cols, model, options, concept, prompt, target_sets, keeper, progress) -> list[dict]:
    """Bias-prompt probabilities, counterfactual images and the four V x L target probabilities, chunk by
    chunk (each chunk's questions in one `score` call); the Fig. 6 examples are offered to `keeper` as
    each chunk is done."""
    cache = CounterfactualCache(options.cache)
    by_image = _rows_of_images(table)
    image_col = table.column("image")
    records = []
    ids = sorted(by_image)
    restricted = options.softmax == "targets"
    relative_prompt = not model.normalised(prompt)
    for start in range(0, len(ids), options.chunk_images):
        chunk = ids[start:start + options.chunk_images]
        loaded = {}
        for image_id in chunk:
            data = image_col[by_image[image_id][0]].as_py()["bytes"]
            loaded[image_id] = (data, _decode(model, data, image_id))
        word = {i: cols["bias_word"][by_image[i][0]] for i in chunk}
        swapped = {i: cols["counterfactual_bias_word"][by_image[i][0]] for i in chunk}
        x_f = {i: loaded[i][1] for i in chunk}
        x_cf = (counterfactuals(model, loaded, swapped, concept.pairs, prompt, options.attack, cache)
                if options.attack is not None else {})
        views = [("f", x_f)] + ([("cf", x_cf)] if x_cf else [])
        queries = Queries()
        bias_q = {(v, i): queries.add(prompt, (v, i), xs[i], concept.pairs[word[i]]) for v, xs in views for i in chunk}
        rows = [r for i in chunk for r in by_image[i]]
        variants = [("p_t_vf_lf", "caption", "f"), ("p_t_vf_lcf", "counterfactual_caption", "f")]
        if x_cf:
            variants += [("p_t_vcf_lcf", "counterfactual_caption", "cf"), ("p_t_vcf_lf", "caption", "cf")]
        images_of = dict(views)
        asked = {name: [queries.add(cols[text][r], (v, cols["image_id"][r]), images_of[v][cols["image_id"][r]],
                                    target_sets[r]) for r in rows] for name, text, v in variants}
        scores = queries.ask(model)
        for name, text, _ in variants:
            cols[name][rows] = probabilities([scores[q] for q in asked[name]], [target_sets[r] for r in rows],
                                             [cols["target"][r] for r in rows],
                                             [restricted or not model.normalised(cols[text][r]) for r in rows])

        def p(view: str, i: str, w: str) -> float:
            return float(probabilities([scores[bias_q[(view, i)]]], [concept.pairs[word[i]]], [w],
                                       relative_prompt)[0])

        for i in chunk:
            record = {"image_id": i, "bias_word": word[i], "counterfactual_bias_word": swapped[i],
                      "p_b_vf": p("f", i, word[i]), "p_bcf_vf": p("f", i, swapped[i])}
            if x_cf:
                record.update(p_b_vcf=p("cf", i, word[i]), p_bcf_vcf=p("cf", i, swapped[i]),
                              linf=float((x_cf[i] - x_f[i]).abs().max()))
            records.append(record)
        if keeper is not None and x_cf:
            chunk_records = {rec["image_id"]: rec for rec in records[-len(chunk):]}
            images_of_rows = [cols["image_id"][r] for r in rows]
            bias = cb.bias_vl(cols["p_t_vf_lf"][rows], cols["p_t_vcf_lcf"][rows],
                              [chunk_records[i]["p_b_vf"] for i in images_of_rows],
                              [chunk_records[i]["p_b_vcf"] for i in images_of_rows], options.min_change)
            keeper.offer(rows, bias, cols, x_f, x_cf)
        if progress is not None:
            progress(len(chunk))
    return records


def load_split(data: str, split: str | None) -> tuple[Path, str, pa.Table]:
    """A built VL-Bias split: its folder, name and table (checked to have the columns CounterBias reads)."""
    folder = resolve_data(data)
    split = pick_split(folder, "default", split, "test")
    table = load_table(folder, "default", split)
    _check_table(table, folder)
    return folder, split, table


def run_counterbias(data: str, spec: str, options: CounterBiasOptions, model_options: ModelOptions, *,
                    split: str | None = None, report: Path | None = None, progress=None, bootstrap: int = 1000,
                    seed: int = 0) -> dict:
    """Measure a model on a built VL-Bias split; returns the metrics (and writes the report), with 95%
    confidence intervals of the Table 2 / Table 3 cells from `bootstrap` resamples of the images."""
    if report is not None:
        from evaluator.publish.report import check_report_folder

        check_report_folder(report, {"--data": data})
    folder, split, table = load_split(data, split)
    concept = Concept.of(folder, table)
    b0 = options.b0 or concept.classes[0]
    if b0 not in concept.classes:
        raise ParamsError(f"--b0 {b0}: the split's sides are {' and '.join(concept.classes)}")
    model = load_probe(spec, model_options)
    if options.attack is not None and model.vision and model.attack_unsupported:
        raise ModelError(model.attack_unsupported)
    result = measure(table, model, options, concept, progress)
    metrics = metrics_of(result, spec, split, options, model, b0)
    if bootstrap and metrics["rows"]:
        from evaluator.stats.bootstrap import intervals

        metrics["intervals"] = intervals(cb.resampling(result["columns"], result["measures"], metrics["templates"],
                                                       b0), bootstrap, seed)
    if report is not None:
        write_counterbias_report(report, metrics, result, options)
    return metrics
