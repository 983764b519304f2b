"""GQA-OOD builder (Kervadec et al., CVPR 2021): entropy-filtered local groups of GQA, head/tail answers.

Stages per split: `index` (read the raw file: ids, byte spans, answers, groups), `select` (group
entropies, threshold, head/tail labels) and `rows` (typed records of the kept questions). Each
stage's output is a set of Arrow tables, cached by the pipelines' stage runner. The statistics and
figures are counted from the index rows of the kept questions once every split is selected, and the
figures handed to the pipeline then, so that they are drawn while the records are decoded.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from builders.base import Builder
from builders.gqa_ood import card as gqa_ood_card
from builders.gqa_ood import reader as gqa
from builders.gqa_ood.rules import (
    PUBLISHED_ALPHAS,
    entropy_threshold,
    normalized_entropy,
    tail_flags_authors_float,
    tail_mask,
)
from builders.result import BuildResult, RunStage, run_uncached
from builders.sources.files import read_bytes
from builders.splits import check_disjoint_ids, check_splits
from core.errors import ParamsError, SourceError
from core.params import param

NAME = "gqa-ood"


@dataclass(frozen=True)
class GQAOODParams:
    """Defaults are the published recipe (the authors' build_gqa_ood.py)."""

    alpha: float = param(0.2, "tail iff count * d / n < 1 + alpha within a kept group (§3)")
    group_threshold: float | Literal["mean-std"] = param(
        "mean-std", "keep groups with normalised entropy <= this: mean - std (authors' code) or a number (0.9 in §3)")
    tail_comparison: Literal["exact", "authors-float"] = param(
        "exact", "exact rational test, or the authors' floating-point test")
    legacy_alphas: tuple[float, ...] = param(PUBLISHED_ALPHAS, "alphas of the --legacy-json alpha_tail files")

    def __post_init__(self):
        if not 1 + self.alpha > 0:
            raise ParamsError(f"alpha={self.alpha}: 1 + alpha must be positive")
        if self.group_threshold != "mean-std" and not np.isfinite(self.group_threshold):
            raise ParamsError(f"group_threshold={self.group_threshold}: expected 'mean-std' or a finite number")
        for a in self.legacy_alphas:
            if not 1 + a > 0:
                raise ParamsError(f"legacy_alphas: {a}: 1 + alpha must be positive")


def features():
    """The typed columns of every config: the original GQA record plus the OOD annotations."""
    from datasets import Features, List, Value

    string = Value("string")
    span = {"span": string, "object": string}
    return Features({
        "question_id": string,
        "question": string, "answer": string, "fullAnswer": string, "imageId": string,
        "isBalanced": Value("bool"),
        "groups": {"global": string, "local": string},
        "types": {"structural": string, "semantic": string, "detailed": string},
        "semantic": List({"operation": string, "argument": string, "dependencies": List(Value("int64"))}),
        "semanticStr": string,
        "entailed": List(string), "equivalent": List(string),
        "annotations": {"answer": List(span), "question": List(span), "fullAnswer": List(span)},
        "subset": string,
        "answer_count": Value("int32"), "group_size": Value("int32"), "group_num_answers": Value("int32"),
        "group_entropy": Value("float64"),
        "record_json": Value("large_string"),
    })


class GQAOODBuilder(Builder):
    name = NAME
    params_class = GQAOODParams
    configs = ("all", "head", "tail")
    default_config = "all"
    splits = ("val", "testdev")
    source_dir = "gqa"
    card_template = "gqa_ood.md"
    floats = ("`group_entropy` is the float64 normalised entropy of the group's answer counts, summed exactly "
              "(`math.fsum`): it depends neither on the answers' order nor on the CPU.")
    description = "GQA-OOD (Kervadec et al., CVPR 2021): rare vs frequent answers in imbalanced GQA groups"
    sources_help = "GQA v1.2 {val,testdev}_balanced_questions.json"

    def table_features(self, config: str):
        return features()

    def check_invariants(self, tables, params: dict) -> list[str]:
        return check_invariants(tables, params)

    @property
    def published_blob_ids(self) -> dict[str, str]:
        return PUBLISHED_BLOB_IDS

    def locate_sources(self, source: Path, splits: list[str], params=None) -> dict[str, Path]:
        """Map each split to its raw file: SOURCE is a folder of GQA files or one such file."""
        check_splits(self.name, splits, self.splits)
        if source.is_file():
            split = next((s for s, f in gqa.SPLIT_FILES.items() if f == source.name), None)
            if split is None and len(splits) == 1:
                split = splits[0]
            if split not in self.splits or (splits and split not in splits):
                raise ParamsError(f"{source}: cannot tell the split; name it *_balanced_questions.json or pass --split")
            return {split: source}
        if not source.is_dir():
            raise SourceError(source, "no such file or folder")
        wanted = splits or [s for s in self.splits if (source / gqa.SPLIT_FILES[s]).exists()]
        found = {s: source / gqa.SPLIT_FILES[s] for s in wanted}
        missing = [str(p) for p in found.values() if not p.exists()]
        if missing or not found:
            expected = ", ".join(gqa.SPLIT_FILES[s] for s in (splits or self.splits))
            raise SourceError(missing[0] if missing else source, f"GQA source file not found (expected {expected})")
        return found

    def build(self, sources: dict[str, Path], params: GQAOODParams, run_stage: RunStage = run_uncached) -> BuildResult:
        contents: dict[Path, bytes] = {}  # each raw file is read once per build, by whichever stage runs first

        def read(path: Path) -> bytes:
            if path not in contents:
                contents[path] = read_bytes(path)
            return contents[path]

        indexes = {s: run_stage(f"index-{s}", {}, [p], lambda p=p: {"index": gqa.read_index(p, read(p))})["index"]
                   for s, p in sorted(sources.items())}
        check_disjoint_ids(sources, indexes)
        key = {"alpha": params.alpha, "group_threshold": params.group_threshold,
               "tail_comparison": params.tail_comparison}
        summaries = {s: run_stage(f"select-{s}", key, [p], lambda i=indexes[s]: select(i, params))
                     for s, p in sorted(sources.items())}
        kept = {s: kept_questions(indexes[s], summaries[s]["selection"]) for s in sources}
        stats = gqa_ood_card.statistics(indexes, summaries, kept, params)
        figures = gqa_ood_card.figures(kept, stats)
        run_stage.figures_known(figures)  # drawn while the records are decoded
        tables: dict[str, dict[str, pa.Table]] = {c: {} for c in self.configs}
        with ThreadPoolExecutor(max_workers=3) as pool:
            # datasets (for the Features) is imported while the records are decoded and filtered:
            # Arrow parses and filters without the GIL
            typed = pool.submit(features)
            for split, path in sorted(sources.items()):
                rows = run_stage(f"rows-{split}", key, [path], lambda p=path, s=summaries[split]["selection"]:
                                 {"all": kept_rows(p, read(p), s)})["all"]
                subsets = {s: pool.submit(lambda s=s, rows=rows: rows.filter(pc.equal(rows.column("subset"), s)))
                           for s in ("head", "tail")}
                schema = typed.result().arrow_schema
                tables["all"][split] = rows.cast(schema)
                for subset, filtered in subsets.items():
                    tables[subset][split] = filtered.result().cast(schema)
        return BuildResult(
            tables=tables, features=typed.result(), statistics=stats,
            card_fields=gqa_ood_card.card_fields(stats, params), figures=figures,
            legacy_files=legacy_files(tables, params),
        )


def select(index: pa.Table, params: GQAOODParams) -> dict[str, pa.Table]:
    """Group the split by local group (null -> 'none'), keep imbalanced groups, label head/tail."""
    local = pc.fill_null(index.column("local_group"), "none").to_pylist()
    answers = index.column("answer").to_pylist()
    groups: dict[str, dict[str, int]] = {}
    for g, a in zip(local, answers):  # dicts keep first-occurrence order (authors-float needs it)
        counts = groups.get(g)
        if counts is None:
            groups[g] = {a: 1}
        else:
            counts[a] = counts.get(a, 0) + 1
    entropy = {g: normalized_entropy(c.values()) for g, c in groups.items()}
    threshold = (entropy_threshold(entropy.values()) if params.group_threshold == "mean-std"
                 else float(params.group_threshold))
    kept = {g for g, e in entropy.items() if e <= threshold}
    labels = {}  # (group, answer) -> subset, answer count, group size, answers in the group, group entropy
    for g in kept:
        counts = groups[g]
        size = sum(counts.values())
        if params.tail_comparison == "exact":
            flags = tail_mask(list(counts.values()), len(counts), size, params.alpha)
        else:
            flags = tail_flags_authors_float(list(counts.values()), params.alpha)
        for (a, count), is_tail in zip(counts.items(), flags):
            labels[g, a] = ("tail" if is_tail else "head", count, size, len(counts), entropy[g])
    rows = [i for i, g in enumerate(local) if g in kept]
    take = pa.array(rows, pa.int64())
    columns = list(zip(*[labels[local[i], answers[i]] for i in rows])) or [()] * 5
    subset, count, size, num_answers, group_entropy = columns
    selection = pa.table({
        "index_row": take,
        "question_id": index.column("question_id").take(take),
        "offset": index.column("offset").take(take),
        "length": index.column("length").take(take),
        "subset": pa.array(subset, pa.string()),
        "answer_count": pa.array(count, pa.int32()),
        "group_size": pa.array(size, pa.int32()),
        "group_num_answers": pa.array(num_answers, pa.int32()),
        "group_entropy": pa.array(group_entropy, pa.float64()),
    }).sort_by("question_id")
    summary = pa.table({"threshold": [threshold], "groups": [len(groups)], "kept_groups": [len(kept)]})
    return {"selection": selection, "summary": summary}


def kept_questions(index: pa.Table, selection: pa.Table) -> pa.Table:
    """The index columns of the selected questions (sorted by id, as the built rows) with their subset
    and group counts: all that the statistics and figures read, known before the records are decoded."""
    kept = index.take(selection.column("index_row"))
    for name in ("subset", "answer_count", "group_size", "group_num_answers"):
        kept = kept.append_column(name, selection.column(name))
    return kept


def kept_rows(path: Path, data: bytes, selection: pa.Table) -> pa.Table:
    """Full typed records of the selected questions (sorted by id) with the OOD columns added: the
    types of `features()`, whose schema (with its hub metadata) the builder then applies."""
    qids = selection.column("question_id").to_pylist()
    records = gqa.read_records(path, data, qids, selection.column("offset").to_numpy(),
                               selection.column("length").to_numpy())
    columns = {"question_id": selection.column("question_id")}
    for name in records.column_names:
        if name == "record_json":
            for added in ("subset", "answer_count", "group_size", "group_num_answers", "group_entropy"):
                columns[added] = selection.column(added)
        columns[name] = records.column(name)
    return pa.table(columns)


def _legacy_json(qids: list[str], fragments: dict[str, str]) -> bytes:
    """The authors' serialisation of the records of `qids`: json.dump(records, fp, sort_keys=True, indent=4), no
    newline, joined from each record's own serialisation (`_record_fragments`): a record's text is the same in
    every file it appears in, so it is serialised once, not once per file (22 alpha files and 3 configs per
    split; the indented encoder is Python's slow one)."""
    if not qids:
        return b"{}"
    return ("{\n" + ",\n".join([fragments[qid] for qid in sorted(qids)]) + "\n}").encode()


def _record_fragments(table: pa.Table) -> dict[str, str]:
    """{question id: its `"id": record` member as json.dumps(records, sort_keys=True, indent=4) writes it in the
    file's object}: the record's lines after the first indented four more spaces (a JSON string holds no raw
    newline).
    The record is written by json's C encoder without indentation, then indented by msgspec's formatter, which
    keeps every token's text: the same characters as the indenting encoder (pure Python, five times slower;
    tested equal on every record of the full-size synthetic val and the published files)."""
    import msgspec

    return {qid: f"    {json.dumps(qid)}: " + msgspec.json.format(
                json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")), indent=4).replace("\n", "\n    ")
            for qid, text in zip(table.column("question_id").to_pylist(), table.column("record_json").to_pylist())}


def legacy_files(tables: dict[str, dict[str, pa.Table]], params: GQAOODParams) -> dict:
    """ood_<split>_{all,head,tail}.json and alpha_tail/<split>_bal_tail_<alpha>.json producers; each split's
    records are serialised once, when its first file is written."""
    files = {}
    for split, table in tables["all"].items():
        fragments: dict[str, str] = {}

        def serialised(t=table, made=fragments) -> dict[str, str]:
            if not made:
                made.update(_record_fragments(t))
            return made

        for config in ("all", "head", "tail"):
            qids = tables[config][split].column("question_id").to_pylist()
            files[f"legacy/ood_{split}_{config}.json"] = lambda q=qids, f=serialised: _legacy_json(q, f())
        ids = table.column("question_id").to_numpy(zero_copy_only=False)
        for alpha in params.legacy_alphas:
            mask = tail_mask(table.column("answer_count").to_numpy(), table.column("group_num_answers").to_numpy(),
                             table.column("group_size").to_numpy(), alpha)
            files[f"legacy/alpha_tail/{split}_bal_tail_{alpha:.1f}.json"] = (
                lambda q=ids[mask].tolist(), f=serialised: _legacy_json(q, f()))
    return files


# Git blob ids of the published files (gqa-ood/GQA-OOD `data/`; shared/reference/gqa_ood/README.md).
# ood_val_all.json is alpha_tail/val_bal_tail_9.0.json and ood_val_tail.json is val_bal_tail_0.2.json.
_PUBLISHED_ALPHA_TAIL = {
    9.0: "428020ab5df3e676087dd3b6dcd689ed8ccc1b0f", 7.0: "8d5188ef58450de338e38f8f6a78147de612a776",
    5.0: "8f3afc2a27166b31374f6f5a5a4b9d09a0e1d1d8", 3.6: "1215bed5221c91e8ff6e26e8103e8624e89af136",
    2.8: "a7322514c5e504c0e7e60ac90bba417772addeee", 2.2: "cfadf01177a89d7193087af5f03cd445ab5a9e21",
    1.8: "78047b8bceb8d63794785783e82f6855d2e62675", 1.4: "42ef17f42ae1c25c93c86383d5e591a0bd28c7e0",
    1.0: "e7d3e9cea773b08fe5444d9d6b403db754045251", 0.8: "4fba4d7ab2a3137a52c8059101890e4ab5342c35",
    0.4: "8a8203c44a682ad582b7fe9a73b3f5b6860ebd88", 0.3: "a8a274f8d4d8b82eb83a4734bc714ffd00a12a80",
    0.2: "04c2cac5de55ae3fce2963714ca9f93fe836aa41", 0.1: "4f099901b27f8bff58260669afb25342886cca24",
    0.0: "b28f2666c9ee548c22676c07bfabf7444dd3aeba", -0.1: "bbbed509e4e7c89d2c9d3beef8ee9218190bf063",
    -0.2: "bff0fdfe56890a426bbe09b14202cf04e94e2b5a", -0.3: "dc9213612d9e3ffa4877a990a60148af6eba4605",
    -0.4: "d0a8c73fb32d2a9b2186d3d087f264a483047077", -0.5: "80f7aa7bd3dfa7a561b68b0fe283555bca3ae71d",
    -0.6: "647ba16cbeb3ccc2779905402ac9fbc92746517d", -0.7: "451a786667eefe4d165f52919e24ea3051015b05",
}
PUBLISHED_BLOB_IDS = {
    "legacy/ood_testdev_all.json": "2556ba80f6a943a1b7b1230e124ffeb2629db183",
    "legacy/ood_testdev_head.json": "a337a0ee07e80379fed1956216fab2c0d058bc17",
    "legacy/ood_testdev_tail.json": "86b068c4535e7c4a7a4ba95e0e4e70306d1050d3",
    "legacy/ood_val_all.json": _PUBLISHED_ALPHA_TAIL[9.0],
    "legacy/ood_val_head.json": "786d4f22f9754a7171f8c7ae9d9a0818e47ea5e9",
    "legacy/ood_val_tail.json": _PUBLISHED_ALPHA_TAIL[0.2],
    **{f"legacy/alpha_tail/val_bal_tail_{a:.1f}.json": blob for a, blob in _PUBLISHED_ALPHA_TAIL.items()},
}


def check_invariants(tables: dict[str, dict[str, pa.Table]], params: dict) -> list[str]:
    """head ∩ tail = ∅, all = head ∪ tail, every kept group whole, labels as the rule gives them.
    Arrow group-bys, no Python lists: `build` runs this on every build before publishing."""
    problems = []
    for split, rows in sorted(tables["all"].items()):
        ids = {c: tables[c][split].column("question_id") for c in ("all", "head", "tail")}
        both = pc.sum(pc.cast(pc.is_in(ids["head"], value_set=ids["tail"]), pa.int64())).as_py() or 0
        if both:
            problems.append(f"{split}: {both} questions are both head and tail")
        covered = all(pc.all(pc.is_in(ids[c], value_set=ids["all"])).as_py() in (True, None) for c in ("head", "tail"))
        if (not covered or len(ids["head"]) + len(ids["tail"]) != rows.num_rows
                or pc.count_distinct(ids["all"]).as_py() != rows.num_rows):
            problems.append(f"{split}: all is not the disjoint union of head and tail")
        local = pc.fill_null(pc.struct_field(rows.column("groups"), "local"), "none")
        t = pa.table({"g": local, "a": rows.column("answer"), "count": rows.column("answer_count"),
                      "d": rows.column("group_num_answers"), "n": rows.column("group_size")})
        sizes = t.group_by("g").aggregate([("a", "count"), ("a", "count_distinct")])
        pairs = t.group_by(["g", "a"]).aggregate([("a", "count")]).rename_columns(["g", "a", "pair_count"])
        joined = t.join(sizes, "g").join(pairs, ["g", "a"])
        bad = pc.or_(pc.or_(pc.not_equal(joined.column("n"), joined.column("a_count")),
                            pc.not_equal(joined.column("count"), joined.column("pair_count"))),
                     pc.not_equal(joined.column("d"), joined.column("a_count_distinct")))
        broken = pc.unique(joined.column("g").filter(bad)).to_pylist()
        if broken:
            problems.append(f"{split}: {len(broken)} kept groups are not whole (first: {min(broken)!r})")
        if params.get("tail_comparison") == "exact":
            count, d, n = (rows.column(c).to_numpy() for c in ("answer_count", "group_num_answers", "group_size"))
            expected = tail_mask(count, d, n, params["alpha"])
            wrong = int((expected != pc.equal(rows.column("subset"), "tail").to_numpy(zero_copy_only=False)).sum())
            if wrong:
                problems.append(f"{split}: {wrong} questions carry a head/tail label the rule does not give")
    return problems
