"""`vlbench demo`: sample sources -> build every benchmark -> verify -> predict baselines -> evaluate."""

from __future__ import annotations

from pathlib import Path

from builders.nlp import PACKAGED_MINILM
from evaluator.models import ModelOptions
from evaluator.run import evaluate, predict
from pipelines.build import run_build
from pipelines.samples import write_samples
from pipelines.verify import verify


def run_demo(out: Path, echo=print) -> dict:
    out = Path(out)
    sources = out / "sources"
    write_samples(sources)
    echo(f"sample sources: {sources}")
    dataset = out / "gqa-ood"
    run_build("gqa-ood", sources, dataset, legacy_json=True)
    problems = verify(dataset).problems
    echo(f"dataset:        {dataset} (card: {dataset / 'README.md'}; verify: "
         f"{'ok' if not problems else problems[0]})")
    results: dict = {}
    for name, spec in (("prior", "baseline:prior"), ("random", "baseline:random")):
        predictions = out / "predictions" / f"gqa-ood-{name}.json"
        predict("gqa-ood", str(dataset), spec, predictions, split="testdev",
                options=ModelOptions(train_file=sources / "gqa" / "train_balanced_questions.json"))
        report = out / "reports" / f"gqa-ood-{name}"
        metrics = evaluate("gqa-ood", str(dataset), predictions, split="testdev", report=report)
        results[name] = metrics
        echo(f"{spec:16s} testdev acc-all {metrics['acc_all']:.1f}  acc-tail {metrics['acc_tail']:.1f}  "
             f"acc-head {metrics['acc_head']:.1f}   report: {report / 'report.md'}")
    results["vcr-visor"] = _vcr_visor(sources, out, echo)
    return results


def _vcr_visor(sources: Path, out: Path, echo) -> dict:
    """Offline: the packaged all-MiniLM-L6-v2 embeds, and the NLI filter is skipped (the card says so)."""
    dataset = out / "vcr-visor"
    run_build("vcr-visor", sources, dataset, assignments=[f"sbert_model={PACKAGED_MINILM}", "nli_model=none"])
    problems = verify(dataset).problems
    echo(f"dataset:        {dataset} (card: {dataset / 'README.md'}; verify: {'ok' if not problems else problems[0]})")
    predictions = out / "predictions" / "vcr-visor-random.json"
    predict("vcr-visor", str(dataset), "baseline:random", predictions)
    report = out / "reports" / "vcr-visor-random"
    metrics = evaluate("vcr-visor", str(dataset), predictions, report=report)
    echo(f"{'baseline:random':16s} val APQ {metrics['apq']:.1f}  HPQ {metrics['hpq']:.1f}  "
         f"accuracy {metrics['accuracy']:.1f}   report: {report / 'report.md'}")
    return metrics
