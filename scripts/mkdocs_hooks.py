"""MkDocs hooks of the documentation site (mkdocs.yml `hooks:`): the pages that must not go stale are
generated from the code at build time, never written by hand.

- `reference/cli.md`: every command, argument and option of the `vlbench` typer app, written by
  typer's own documentation generator (what `typer pipelines.cli utils docs` prints).
- `<!-- vlbench:params BENCH -->` in a page: the benchmark's `build --param` parameters and
  `evaluate --option` scoring options as tables (name, type, default, meaning), read from its
  params dataclasses as `vlbench params BENCH` reads them.
- `<!-- vlbench:model-options -->`: the model options (flag, default, which models read it, meaning), from
  their one declaration (evaluator/models/options.py).
- `<!-- vlbench:benchmarks -->`: the table of benchmarks, taken from the README (written once, there).
- `<!-- vlbench:families -->`: every image-text-to-text family of the installed transformers, how vlbench
  prompts it and whether a tiny checkpoint of it runs in the tests (evaluator/models/families.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARAMS_MARKER = re.compile(r"<!-- vlbench:params ([a-z0-9-]+) -->")
MODEL_OPTIONS_MARKER = "<!-- vlbench:model-options -->"
FAMILIES_MARKER = "<!-- vlbench:families -->"
BENCHMARKS_MARKER = "<!-- vlbench:benchmarks -->"


def benchmarks_table() -> str:
    """The README's table of benchmarks (its rows from `| name | paper |` to the table's last line)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("| name | paper |"))
    end = next((n for n in range(start, len(lines)) if not lines[n].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def families_table() -> str:
    """The families table (evaluator.models.families.families_rows), tiny checkpoints from pipelines.tiny_families."""
    from evaluator.models.families import families_rows
    from pipelines.tiny_families import TINY_FAMILIES, VLLM_TINY_FAMILIES

    rows = ["| family (model type) | processor | video part needs torchvision | prompted by | vllm: | tiny checkpoint "
            "in the tests |", "|---|---|---|---|---|---|"]
    for r in families_rows(set(TINY_FAMILIES), {"llava", *VLLM_TINY_FAMILIES}):
        rows.append(f"| `{r['family']}` | {r['processor']} | {'yes' if r['video'] else 'no'} | {r['prompted_by']} | "
                    f"{r['vllm']} | {'yes' if r['tested'] else '-'} |")
    return "\n".join(rows)


def cli_reference() -> str:
    """The CLI reference page, from the typer app."""
    import typer
    from typer.cli import get_docs_for_click

    from pipelines.cli import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command, info_name="vlbench")
    body = get_docs_for_click(obj=command, ctx=ctx, name="vlbench", title="CLI reference")
    note = ("Generated from the `vlbench` command-line app when the site is built (`make docs`); "
            "`vlbench COMMAND --help` prints the same.\n\n")
    head, _, rest = body.partition("\n\n")
    return f"{head}\n\n{note}{rest}"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def params_tables(bench: str) -> str:
    """The benchmark's build parameters and scoring options as Markdown tables."""
    from builders.registry import get_builder
    from core.params import describe
    from evaluator.tasks import get_task, has_task

    sections = [(f"Build parameters (`vlbench build {bench} --param KEY=VALUE`)", get_builder(bench).params_class)]
    if has_task(bench):
        sections.append((f"Scoring options (`vlbench evaluate {bench} --option KEY=VALUE`)",
                         get_task(bench).options_class))
    out = []
    for title, params_class in sections:
        rows = describe(params_class) if params_class is not None else []
        out.append(f"**{title}**" + ("" if rows else ": none."))
        if rows:
            out += ["", "| name | type | default | meaning |", "|---|---|---|---|"]
            for row in rows:
                default = ",".join(map(str, row["default"])) if isinstance(row["default"], tuple) else row["default"]
                out.append(f"| `{row['name']}` | {_cell(row['type'])} | `{_cell(default)}` | {_cell(row['help'])} |")
        out.append("")
    return "\n".join(out)


def on_files(files, config):
    from mkdocs.structure.files import File

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    files.append(File.generated(config, "reference/cli.md", content=cli_reference()))
    return files


def on_page_markdown(markdown: str, page, config, files):
    if BENCHMARKS_MARKER in markdown:
        markdown = markdown.replace(BENCHMARKS_MARKER, benchmarks_table())
    if FAMILIES_MARKER in markdown:
        markdown = markdown.replace(FAMILIES_MARKER, families_table())
    if MODEL_OPTIONS_MARKER in markdown:
        from evaluator.models.options import options_table

        markdown = markdown.replace(MODEL_OPTIONS_MARKER, options_table())
    return PARAMS_MARKER.sub(lambda m: params_tables(m.group(1)), markdown)
