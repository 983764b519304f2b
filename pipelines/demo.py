"""`vlbench demo`: sample sources -> build every benchmark -> verify -> predict baselines -> evaluate ->
perceptual scores, CounterBias -> a report card (`vlbench suite`)."""

from __future__ import annotations

from pathlib import Path

from builders.registry import benchmarks
from core.errors import VlbenchError
from evaluator.models.options import ModelOptions
from evaluator.perceptual.run import perceptual_score
from evaluator.perceptual.score import PerceptualOptions
from evaluator.request import ScoringRequest
from evaluator.run import evaluate, predict
from evaluator.tasks import get_task, has_task
from pipelines.build import run_build
from pipelines.samples import write_samples
from pipelines.verify import verify


def run_demo(out: Path, echo=print) -> dict:
    out = Path(out)
    sources = out / "sources"
    write_samples(sources)
    echo(f"sample sources: {sources}")
    results: dict = {}
    for benchmark in benchmarks():
        bench, demo = benchmark.name, benchmark.demo
        headline = get_task(bench).headline if has_task(bench) else ()
        dataset = out / bench
        options = ModelOptions(train_file=None if demo.train_file is None else sources / demo.train_file)
        run_build(bench, sources, dataset, assignments=benchmark.demo_params, legacy_json=demo.legacy_json)
        problems = verify(dataset).problems
        echo(f"{bench:10s} {dataset} (card: README.md; verify: {'ok' if not problems else problems[0]})")
        for spec in demo.models:
            name = spec.split(":", 1)[1]
            predictions = out / "predictions" / f"{bench}-{name}.json"
            split, _, _ = predict(bench, str(dataset), spec, predictions, options=options)
            report = out / "reports" / f"{bench}-{name}"
            metrics = evaluate(ScoringRequest(bench, str(dataset), split, train_file=options.train_file), predictions,
                               report=report)
            results[f"{bench}:{name}"] = metrics
            shown = "  ".join(f"{h.label} {_fmt(metrics[h.key])}" for h in headline)
            echo(f"  {spec:26s} {split:10s} {shown}   report: {report / 'report.md'}")
    # Perceptual scores of blind baselines (Gat et al., NeurIPS 2021): each reads one modality, so only
    # that one scores.
    for bench, spec, by in [(b.name, spec, by) for b in benchmarks() for spec, by in b.demo.perceptual]:
        report = out / "reports" / f"perceptual-{bench}-{spec.split(':', 1)[1]}"
        metrics = perceptual_score(ScoringRequest(bench, str(out / bench)), spec, PerceptualOptions(by=by),
                                   report=report)
        results[f"perceptual:{bench}:{spec}"] = metrics
        (metric, summary), = metrics["all"].items()
        shown = "  ".join(f"P_{m}/Z_D {_fmt(v['p_zd']['mean'])}" for m, v in summary["modalities"].items())
        echo(f"perceptual {bench} {spec}: {shown}   report: {report / 'report.md'}")
    results["counterbias"] = _counterbias(out, echo)
    results.update(_report_cards(out, echo))
    return results


def _report_cards(out: Path, echo) -> dict:
    """`vlbench suite` of baseline:random and of the tiny random LLaVA over the demo's builds (the LLaVA
    reads the sample sources' pictures: --images-root OUT/sources, and runs blind too: its card's multimodal
    gains, `--blind`, and leakage against its own language model saved alone, `--base-llm`), each card under
    OUT/card-<model>,
    then `vlbench suite-compare` of the two under OUT/card-compare. The LLaVA's perceptual scores are
    left out (--no-perceptual: several more passes of the model per benchmark)."""
    from evaluator.suite.compare import compare_cards
    from evaluator.suite.run import run_suite
    from pipelines.tiny_models import write_tiny_llava_language_model

    results, folders = {}, []
    # the suite's training source (--train-file): the demo's (GQA's training questions), for the card's
    # prior-following rate; the suite takes one, so at most one benchmark's demo may declare one
    train = [entry.demo.train_file for entry in benchmarks() if entry.demo.train_file is not None]
    if len(train) > 1:
        raise VlbenchError(f"the demo's suites take one --train-file; demos declare {len(train)}: {', '.join(train)}")
    common = {"model_options": ModelOptions(train_file=out / "sources" / train[0])} if train else {}
    base_llm = write_tiny_llava_language_model(out / "models" / "tiny-llava", out / "models" / "tiny-llava-lm")
    llava = {"images_root": out / "sources", "perceptual": False, "blind": True, "base_llm": f"hf:{base_llm}",
             **common}
    for spec, options in (("baseline:random", common), (f"hf:{out / 'models' / 'tiny-llava'}", llava)):
        name = spec.rsplit("/", 1)[-1].replace(":", "-")
        folder = out / f"card-{name}"
        card = run_suite(spec, out, folder, echo=lambda line: None, **options)
        scored = sum(r["status"] == "scored" for r in card["benchmarks"].values())
        echo(f"report card of {name}: {scored} of {len(card['benchmarks'])} benchmarks scored, "
             f"{len(card['diagnostics'])} diagnostics   card: {folder / 'report.md'}")
        results[f"suite:{name}"] = card
        folders.append(folder)
    compared = compare_cards(folders, out / "card-compare")
    echo(f"suite-compare {' vs '.join(f.name for f in folders)}: {len(compared['comparisons'])} paired comparisons"
         f"   page: {out / 'card-compare' / 'index.html'}")
    results["suite-compare"] = compared
    return results


def _counterbias(out: Path, echo) -> dict:
    """CounterBias (Zhang, Wang, Sang, ACM MM 2022) of a tiny random ViLT masked LM and of a tiny random
    generative VLM (LLaVA), written under OUT/models (offline), and the two compared cell by cell."""
    from evaluator.vl_bias.compare import compare_reports
    from evaluator.vl_bias.counterbias import MEASURES
    from evaluator.vl_bias.run import CounterBiasOptions, run_counterbias
    from pipelines.tiny_models import write_tiny_llava, write_tiny_vilt_mlm

    results = {}
    for name, writer in (("tiny-vilt-mlm", write_tiny_vilt_mlm), ("tiny-llava", write_tiny_llava)):
        model = writer(out / "models" / name)
        report = out / "reports" / f"counterbias-{name}"
        metrics = run_counterbias(str(out / "vl-bias"), f"hf:{model}", CounterBiasOptions(), ModelOptions(),
                                  report=report)
        shown = "  ".join(f"{MEASURES[m][0]} {_fmt(100 * metrics['measures'][m]['avg']['activity'])}%"
                          for m in ("vl", "v", "l"))
        echo(f"counterbias vl-bias hf:{name} (random weights): activities {shown}; counterfactual images raise "
             f"P(B') on {100 * metrics['attack']['raised_b_prime']:.0f}% of images   report: {report / 'report.md'}")
        results[name] = metrics
    compared = out / "reports" / "counterbias-vilt-vs-llava"
    results["compared"] = compare_reports(out / "reports" / "counterbias-tiny-vilt-mlm",
                                          out / "reports" / "counterbias-tiny-llava", out=compared)
    echo(f"counterbias-compare tiny ViLT vs tiny LLaVA, cell by cell with paired intervals   report: "
         f"{compared / 'report.md'}")
    return results


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3f}" if abs(value) < 1 else f"{value:.1f}"
