"""Statistics, card tables and figure data of a GQA-OOD build (Kervadec et al., CVPR 2021, Table 1, Fig. 1,
Figs. 6-9)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from builders.gqa_ood.rules import alpha_fraction
from core.figures import FigureSpec
from core.markdown import table

HEAD_COLOR, TAIL_COLOR = "#1f77b4", "#ff7f0e"


def _local_groups(column: pa.ChunkedArray) -> pa.ChunkedArray:
    return pc.fill_null(column, "none")


def _size(kept: pa.Table) -> dict:
    return {"questions": kept.num_rows, "groups": len(pc.unique(_local_groups(kept.column("local_group")))),
            "images": len(pc.unique(kept.column("image_id")))}


def _type_counts(column) -> dict[str, int]:
    counts = pc.value_counts(column).to_pylist()
    return dict(sorted((c["values"], c["counts"]) for c in counts))


def statistics(indexes: dict, summaries: dict, kept: dict, params) -> dict:
    """Table 1 (a) and (b) per split, the selection threshold, boundary groups and type distributions,
    from each split's index, selection summary and kept questions (`builder.kept_questions`)."""
    out = {}
    bound = 1 + alpha_fraction(params.alpha)
    for split in sorted(indexes):
        index, summary, rows = indexes[split], summaries[split]["summary"], kept[split]
        subsets = {"all": rows, **{s: rows.filter(pc.equal(rows.column("subset"), s)) for s in ("head", "tail")}}
        count, d, n = (rows.column(c).to_numpy().astype(np.int64)
                       for c in ("answer_count", "group_num_answers", "group_size"))
        boundary = pa.array(count * d * bound.denominator == n * bound.numerator)
        types = {}
        for kind in ("structural", "semantic"):
            types[kind] = {"GQA": _type_counts(index.column(kind))}
            for config in ("all", "tail"):
                types[kind][f"GQA-OOD {config}"] = _type_counts(subsets[config].column(kind))
        out[split] = {
            "gqa": {"questions": index.num_rows, "groups": summary.column("groups")[0].as_py(),
                    "images": len(pc.unique(index.column("image_id")))},
            "ood": {config: _size(subsets[config]) for config in ("all", "head", "tail")},
            "threshold": summary.column("threshold")[0].as_py(),
            "boundary_groups": len(pc.unique(rows.column("local_group").filter(boundary))),
            "types": types,
        }
    return {"splits": out}


def card_fields(stats: dict, params) -> dict[str, str]:
    """Markdown blocks for data_cards/gqa_ood.md."""
    splits = stats["splits"]
    t1a = [["GQA-OOD", s, *splits[s]["ood"]["all"].values()] for s in splits]
    t1a += [["GQA", s, *splits[s]["gqa"].values()] for s in splits]
    t1b = [[f"GQA-OOD {s}", sub, *splits[s]["ood"][sub].values()] for s in splits for sub in ("head", "tail")]
    rule = ("mean - std of the normalised entropies of all local groups" if params.group_threshold == "mean-std"
            else f"fixed at {params.group_threshold}")
    selection = [[s, f"{splits[s]['threshold']:.6f}", splits[s]["gqa"]["groups"], splits[s]["ood"]["all"]["groups"],
                  splits[s]["boundary_groups"]] for s in splits]
    types = []
    for s in splits:
        for kind, series in splits[s]["types"].items():
            for name, counts in series.items():
                total = sum(counts.values()) or 1
                types.append([s, kind, name, ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in counts.items())])
    return {
        "table_1a": table(["Dataset", "Split", "#Quest.", "#Groups", "#Imgs"], t1a),
        "table_1b": table(["Split", "Subset", "#Quest.", "#Groups", "#Imgs"], t1b),
        "selection": table(["Split", "Entropy threshold", "Local groups (GQA)", "Kept groups",
                             "Kept groups with an answer at count·d = (1+alpha)·n"], selection),
        "threshold_rule": rule,
        "types": table(["Split", "Type", "Set", "Distribution"], types),
        "alpha": str(params.alpha),
        "tail_comparison": params.tail_comparison,
    }


def figures(kept: dict, stats: dict) -> list[FigureSpec]:
    """Fig. 1-style answer histogram of the largest kept group and Figs. 6-9 type distributions."""
    specs = []
    for split, rows in sorted(kept.items()):
        if rows.num_rows == 0:
            continue
        local = _local_groups(rows.column("local_group"))
        sizes = Counter(local.to_pylist())
        group = min(sizes, key=lambda g: (-sizes[g], g))
        members = rows.filter(pc.equal(local, group))
        counts = Counter(zip(members.column("answer").to_pylist(), members.column("subset").to_pylist()))
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0]))
        specs.append(FigureSpec(
            filename=f"{split}_group_answers.png", title=f"{split}: answers of local group '{group}'",
            categories=[a for (a, _), _ in ordered], series={"questions": [c for _, c in ordered]},
            ylabel="questions", bar_colors=[TAIL_COLOR if s == "tail" else HEAD_COLOR for (_, s), _ in ordered],
            legend_colors={"head": HEAD_COLOR, "tail": TAIL_COLOR}))
        for kind, series in stats["splits"][split]["types"].items():
            categories = sorted({k for counts in series.values() for k in counts})
            specs.append(FigureSpec(
                filename=f"{split}_{kind}_types.png", title=f"{split}: {kind} question types",
                categories=categories, ylabel="% of questions",
                series={name: [100 * counts.get(k, 0) / (sum(counts.values()) or 1) for k in categories]
                        for name, counts in series.items()}))
    return specs
