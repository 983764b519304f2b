"""Card pieces shared by the benchmarks the pairing recipe builds from a source table of the VCR-Visor
paper's Appendix C (PMR-P, COSIM-Q, COSIM-C): Table 7's count next to the build, the mining funnel and
what the NLI filter did."""

from __future__ import annotations

from builders.pairing import NO_NLI
from core.figures import FigureSpec


def nli_note(params, paired: str, answers: str, group: str) -> str:
    """What the NLI step did: the filter with its model, or a warning that it was skipped."""
    if params.nli_model != NO_NLI:
        return (f"Pairs were then filtered with the MNLI model `{params.nli_model}` (labels read from its config): "
                f"the {paired}s must entail each other in both directions and neither {answers} may entail the "
                "other.")
    return (f"**The NLI filter was skipped (`nli_model=none`)**: pairs are selected by Sentence-BERT cosines and "
            f"{group} only, so some {paired} pairs may not be true paraphrases.")


def counts_table(source: str, paper_source: int, paper_examples: int, stats: dict) -> str:
    """Table 7's row next to this build's. The paper counts "examples" without saying whether one is
    a pair (as its Table 2 counts VCR-Visor) or a sub-question, so the build gives both."""
    return "\n".join([
        f"| | {source} | Examples (Table 7) | Pairs | Sub-questions | Images |", "|---|---|---|---|---|---|",
        f"| VCR-Visor paper, Table 7 | {paper_source:,} | {paper_examples:,} | - | - | - |",
        f"| This build | {stats['source_examples']:,} | - | {stats['pairs']:,} | {stats['sub_questions']:,} | "
        f"{stats['images']:,} |"])


def funnel_table(counts: dict, group: str) -> str:
    return "\n".join([f"| Candidate pairs (cosines, {group}) | One answer once re-tagged | After NLI | Sampled |",
                      "|---|---|---|---|",
                      f"| {counts['candidates']:,} | {counts.get('same_after_retag', 0):,} | {counts['kept']:,} | "
                      f"{counts['sampled']:,} |"])


def funnel_figure(counts: dict, paired: str) -> FigureSpec:
    return FigureSpec(filename="mining_funnel.png", title=f"Pairs of equivalent {paired}s",
                      categories=["candidates", "after NLI", "sampled"], ylabel="pairs",
                      series={"pairs": [counts["candidates"], counts["kept"], counts["sampled"]]})
