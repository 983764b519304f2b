"""`vlbench counterbias`: CounterBias (Zhang, Wang, Sang, ACM MM 2022, §3) of a masked-LM model on a built
VL-Bias split.

Per image: P(B | V_f) and P(B' | V_f) from the bias prompt (Eq. 2), the counterfactual image V_cf by
PGD on that prompt (Eq. 3, cached), P(B | V_cf). Per image x template row: P(T | V, L) at the
caption's [MASK] for (V_f, L_f), (V_cf, L_cf), (V_cf, L_f), (V_f, L_cf) (Eq. 1, 5, 8, 10) and, with no
image (Eq. 12), for L_f and L_cf. Then Eq. 6, 9, 11, 13 per row, Eq. 7 per target and Table 2's cells
(`evaluator.vl_bias.counterbias`). Images are processed in chunks, so memory does not grow with the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from builders.vl_bias.words import TARGETS
from core.data import load_table, pick_split, resolve_data
from core.errors import ModelError, ParamsError
from evaluator.models.images import open_image
from evaluator.models.mlm import load_masked_lm, pad_images
from evaluator.models.options import ModelOptions
from evaluator.vl_bias import counterbias as cb
from evaluator.vl_bias.attack import PGD, CounterfactualCache, pgd_attack
from evaluator.vl_bias.report import metrics_of, templates_present, write_counterbias_report

COLUMNS = ("id", "instance_id", "image_id", "image", "target", "target_type", "gender", "gender_class",
           "counterfactual_gender", "template", "caption", "counterfactual_caption", "bias_prompt")
EXAMPLES = 4  # Fig. 6 instances in the report, half male and half female


class ExampleKeeper:
    """The Fig. 6 examples, chosen while the images stream through `measure`: per gender class, the
    k/2 rows of the first template with the largest |Eq. 6| bias (ties: the earlier row), kept with
    their V_f and V_cf so that the report needs no second decode or attack."""

    def __init__(self, template: str, k: int = EXAMPLES):
        self.template, self.k = template, k
        self.best: dict[str, list[tuple[float, int]]] = {"male": [], "female": []}
        self.pixels: dict[str, dict] = {}

    def offer(self, rows: list[int], bias: np.ndarray, cols: dict, x_f: dict, x_cf: dict) -> None:
        for r, b in zip(rows, bias):
            side = cols["gender_class"][r]
            if cols["template"][r] == self.template and side in self.best and not np.isnan(b):
                self.best[side].append((-abs(float(b)), r))
        for side in self.best:
            self.best[side] = sorted(self.best[side])[: self.k // 2]
        wanted = {cols["image_id"][r] for _, r in self.best["male"] + self.best["female"]}
        for r in rows:
            image_id = cols["image_id"][r]
            if image_id in wanted and image_id not in self.pixels:
                self.pixels[image_id] = {"f": x_f[image_id], "cf": x_cf[image_id]}
        self.pixels = {i: p for i, p in self.pixels.items() if i in wanted}

    def rows(self) -> list[int]:
        return [r for side in ("male", "female") for _, r in self.best[side]]


@dataclass(frozen=True)
class CounterBiasOptions:
    attack: PGD | None = PGD()  # None: no counterfactual images, language measures only
    softmax: str = "full"  # "full" vocabulary (Eq. 1) or "targets": over the target list of the row's type
    b0: str = "male"  # Eq. 7's B0: positive biases lean towards it
    min_change: float = 1e-6  # |change of the bias concept| below this: instance bias undefined
    cache: Path | None = None  # counterfactual images; None: no cache
    chunk_images: int = 128

    def __post_init__(self):
        if self.softmax not in ("full", "targets"):
            raise ParamsError(f"--softmax {self.softmax}: expected full or targets")
        if self.b0 not in ("male", "female"):
            raise ParamsError(f"--b0 {self.b0}: expected male or female")
        if not 0 < self.min_change < float("inf"):
            raise ParamsError(f"--min-concept-change {self.min_change}: expected a positive number")


class Vocabulary:
    """Candidate tokens at the [MASK]: every VL-Bias target and the split's gender words (first word piece)."""

    def __init__(self, model, genders: list[str]):
        words = sorted({w for ws in TARGETS.values() for w in ws} | set(genders))
        pieces = model.word_ids(words)
        self.ids = sorted({i for i, _ in pieces.values()})
        self.column = {w: self.ids.index(i) for w, (i, _) in pieces.items()}
        self.multi_piece = {w: n for w, (_, n) in pieces.items() if n > 1}
        self.restricted = {kind: np.isin(np.arange(len(self.ids)), [self.column[w] for w in words_])
                           for kind, words_ in TARGETS.items()}

    def probability(self, log_probs: np.ndarray, words: list[str], kinds: list[str] | None) -> np.ndarray:
        """P([MASK] = word) per query; restricted to the target list of each query's type when `kinds`."""
        index = np.array([self.column[w] for w in words], dtype=np.int64)
        among = None if kinds is None else np.stack([self.restricted[k] for k in kinds])
        return cb.mask_probability(log_probs, index, among)


def _check_table(table: pa.Table, folder: Path) -> None:
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ParamsError(f"{folder}: not a VL-Bias build (no column {missing[0]})")


def counterfactuals(model, images: dict[str, tuple[bytes, object]], targets: dict[str, str], prompt: str,
                    attack: PGD, vocab: Vocabulary, cache: CounterfactualCache, batch_size: int) -> dict:
    """V_cf per image id (Eq. 3): from the cache, else PGD in batches of similar size (less padding)."""
    out, todo = {}, []
    for image_id, (data, x_f) in images.items():
        key = cache.key(data, model.fingerprint, prompt, targets[image_id], attack, model.bf16)
        hit = cache.get(key)
        if hit is None:
            todo.append((image_id, key, x_f))
        else:
            out[image_id] = hit
    todo.sort(key=lambda item: (item[2].shape[1], item[2].shape[2], item[0]))
    for start in range(0, len(todo), batch_size):
        batch = todo[start:start + batch_size]
        pixels, mask = pad_images([x for _, _, x in batch])
        pixels, mask = pixels.to(model.runner.device), mask.to(model.runner.device)
        text = model.tokenize([prompt] * len(batch))
        target_cols = [vocab.column[targets[image_id]] for image_id, _, _ in batch]
        adv = pgd_attack(lambda x: model.log_probs_at_mask(x, mask, text, vocab.ids), pixels, mask, target_cols, attack)
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


def measure(table: pa.Table, model, options: CounterBiasOptions, progress=None) -> dict:
    """Per-row probabilities and instance biases (numpy columns), per-image attack records, vocabulary."""
    prompts = set(table.column("bias_prompt").to_pylist())
    if len(prompts) > 1:
        raise ParamsError(f"the split has {len(prompts)} different bias prompts; expected one")
    prompt = prompts.pop() if prompts else ""
    genders = sorted(set(table.column("gender").to_pylist()) | set(table.column("counterfactual_gender").to_pylist()))
    vocab = Vocabulary(model, genders)
    n = table.num_rows
    cols = {c: np.asarray(table.column(c).to_pylist(), dtype=object) for c in COLUMNS if c != "image"}
    kinds = list(cols["target_type"]) if options.softmax == "targets" else None
    target_words = list(cols["target"])

    # Eq. 12-13: no image (a blank one for a vision model), factual and counterfactual captions
    texts = sorted(set(cols["caption"]) | set(cols["counterfactual_caption"]))
    blank = model.blank_image() if model.vision else None
    text_scores = dict(zip(texts, model.score([(t, blank) for t in texts], vocab.ids)))
    for name, source in (("p_t_lf", "caption"), ("p_t_lcf", "counterfactual_caption")):
        cols[name] = vocab.probability(np.stack([text_scores[t] for t in cols[source]]) if n else
                                       np.zeros((0, len(vocab.ids))), target_words, kinds)
    cols["bias_l_log"] = cb.bias_l_log(cols["p_t_lf"], cols["p_t_lcf"])
    measures, images, keeper = ["l_log"], [], None
    if model.vision:
        measures = ["l"] + measures
        for name in ("p_t_vf_lf", "p_t_vf_lcf", "p_t_vcf_lcf", "p_t_vcf_lf"):
            cols[name] = np.full(n, np.nan)
        if options.attack is not None:
            measures = ["vl", "v"] + measures
            keeper = ExampleKeeper(templates_present(cols)[0]) if n else None
        images = _score_images(table, cols, model, options, vocab, prompt, target_words, kinds, keeper, progress)
        cols["bias_l"] = cb.bias_l(cols["p_t_vf_lf"], cols["p_t_vf_lcf"])
        if options.attack is not None:
            per_image = {r["image_id"]: r for r in images}
            p_b_vf = np.array([per_image[i]["p_b_vf"] for i in cols["image_id"]])
            p_b_vcf = np.array([per_image[i]["p_b_vcf"] for i in cols["image_id"]])
            cols["p_b_vf"], cols["p_b_vcf"] = p_b_vf, p_b_vcf
            cols["bias_vl"] = cb.bias_vl(cols["p_t_vf_lf"], cols["p_t_vcf_lcf"], p_b_vf, p_b_vcf, options.min_change)
            cols["bias_v"] = cb.bias_v(cols["p_t_vf_lf"], cols["p_t_vcf_lf"], p_b_vf, p_b_vcf, options.min_change)
    examples = {"rows": keeper.rows(), "pixels": keeper.pixels} if keeper else {"rows": [], "pixels": {}}
    return {"columns": cols, "measures": measures, "images": images, "vocab": vocab, "prompt": prompt,
            "examples": examples}


def _score_images(table, cols, model, options, vocab, prompt, target_words, kinds, keeper, progress) -> list[dict]:
    """Bias-prompt probabilities, counterfactual images and the four V x L target probabilities, chunk by
    chunk; the Fig. 6 examples are offered to `keeper` as each chunk is done."""
    cache = CounterfactualCache(options.cache)
    by_image = _rows_of_images(table)
    image_col = table.column("image")
    records = []
    ids = sorted(by_image)
    batch_size = model.runner.batch_size
    for start in range(0, len(ids), options.chunk_images):
        chunk = ids[start:start + options.chunk_images]
        loaded = {}
        for image_id in chunk:
            data = image_col[by_image[image_id][0]].as_py()["bytes"]
            loaded[image_id] = (data, _decode(model, data, image_id))
        gender = {i: cols["gender"][by_image[i][0]] for i in chunk}
        swapped = {i: cols["counterfactual_gender"][by_image[i][0]] for i in chunk}
        x_f = {i: loaded[i][1] for i in chunk}
        prompt_f = model.score([(prompt, x_f[i]) for i in chunk], vocab.ids)
        x_cf = (counterfactuals(model, loaded, swapped, prompt, options.attack, vocab, cache, batch_size)
                if options.attack is not None else {})
        prompt_cf = model.score([(prompt, x_cf[i]) for i in chunk], vocab.ids) if x_cf else None
        for k, i in enumerate(chunk):
            record = {"image_id": i, "gender": gender[i], "counterfactual_gender": swapped[i],
                      "p_b_vf": float(vocab.probability(prompt_f[k:k + 1], [gender[i]], None)[0]),
                      "p_bcf_vf": float(vocab.probability(prompt_f[k:k + 1], [swapped[i]], None)[0])}
            if x_cf:
                record.update(p_b_vcf=float(vocab.probability(prompt_cf[k:k + 1], [gender[i]], None)[0]),
                              p_bcf_vcf=float(vocab.probability(prompt_cf[k:k + 1], [swapped[i]], None)[0]),
                              linf=float((x_cf[i] - x_f[i]).abs().max()))
            records.append(record)
        rows = [r for i in chunk for r in by_image[i]]
        variants = [("p_t_vf_lf", "caption", x_f), ("p_t_vf_lcf", "counterfactual_caption", x_f)]
        if x_cf:
            variants += [("p_t_vcf_lcf", "counterfactual_caption", x_cf), ("p_t_vcf_lf", "caption", x_cf)]
        for name, text, pixels in variants:
            scores = model.score([(cols[text][r], pixels[cols["image_id"][r]]) for r in rows], vocab.ids)
            cols[name][rows] = vocab.probability(scores, [target_words[r] for r in rows],
                                                 None if kinds is None else [kinds[r] for r in rows])
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


def run_counterbias(data: str, spec: str, options: CounterBiasOptions, model_options: ModelOptions, *,
                    split: str | None = None, report: Path | None = None, progress=None, bootstrap: int = 1000,
                    seed: int = 0) -> dict:
    """Measure a model on a built VL-Bias split; returns the metrics (and writes the report), with 95%
    confidence intervals of the Table 2 / Table 3 cells from `bootstrap` resamples of the images."""
    folder = resolve_data(data)
    split = pick_split(folder, "default", split, "test")
    table = load_table(folder, "default", split)
    _check_table(table, folder)
    model = load_masked_lm(spec, model_options)
    result = measure(table, model, options, progress)
    metrics = metrics_of(result, spec, split, options, model)
    if bootstrap and metrics["rows"]:
        from evaluator.stats.bootstrap import intervals

        metrics["intervals"] = intervals(cb.resampling(result["columns"], result["measures"], metrics["templates"],
                                                       options.b0), bootstrap, seed)
    if report is not None:
        write_counterbias_report(report, metrics, result, options)
    return metrics
