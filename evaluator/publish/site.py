"""The static pages of `vlbench leaderboard`: index.html (the dataset card's summary, a table sortable
by any column with each metric's confidence interval, invalid submissions with their error) and one
page per scored submission (its report, rendered, with its plots).

Every string that comes from a file name, a submission, a record or a card reaches a page through one
path: the Jinja2 templates of `site_templates/` with autoescaping on, and Markdown (reports, the card's
summary) rendered by `safe_markdown` (raw HTML shown as text, links only to the site or to http(s) /
mailto, images only from the page's own folder). Each page carries a Content-Security-Policy that
lets it load styles, scripts and images from the site alone; the sort script and the style sheet are
files of the site, so nothing is inline and nothing remote is loaded: the site works from a file
system or any static host."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

from evaluator.tasks import get_task

TEMPLATES = Path(__file__).resolve().parent / "site_templates"
ASSETS = ("site.css", "site.js")
# `'self'` covers the site's own files (over http(s) and, in Chromium and Firefox, file:// too). The policy is a
# <meta> element, where browsers ignore frame-ancestors (Chromium logs an error for it): a server that serves the
# pages sends that one as a header (`vlbench serve`, pipelines/serve/pages.py).
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; base-uri 'none'; "
       "form-action 'none'")
_LINK_SCHEMES = {"http", "https", "mailto"}


def _environment(extra: Path | None = None):
    """The templates, autoescaped: site_templates/, and `extra` (another layer's pages, which extend its base)."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    folders = [TEMPLATES] if extra is None else [Path(extra), TEMPLATES]
    return Environment(loader=FileSystemLoader(folders), autoescape=True, undefined=StrictUndefined,
                       keep_trailing_newline=True)


def _relative_inside(url: str) -> bool:
    """A URL that names a file below the page: no scheme, no host, no absolute or parent path."""
    parts = urlsplit(url)
    return (not parts.scheme and not parts.netloc and not url.startswith(("/", "\\"))
            and ".." not in re.split(r"[/\\]", parts.path))


def safe_markdown(text: str, images: set[str] = frozenset()):
    """Markdown as sanitised HTML (a `markupsafe.Markup`): raw HTML is escaped as text; a link keeps
    its target only when it stays on the site or is http(s) / mailto; an image is kept only when its
    source is one of `images` (file names beside the page), else its alt text stands in its place."""
    from markdown_it import MarkdownIt
    from markupsafe import Markup

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    for token in tokens:
        for k, child in enumerate(token.children or []):
            if child.type == "image" and not (_relative_inside(child.attrGet("src") or "")
                                              and urlsplit(child.attrGet("src")).path in images):
                alt = type(child)("text", "", 0, content=child.content)
                token.children[k] = alt
            elif child.type == "link_open":
                href = child.attrGet("href") or ""
                if not (_relative_inside(href) or urlsplit(href).scheme.lower() in _LINK_SCHEMES):
                    child.attrs.pop("href", None)
    return Markup(md.renderer.render(tokens, md.options, {}))  # noqa: S704 -- sanitised above


def card_summary(folder: Path) -> str:
    """The dataset card's body up to its first second-level section (YAML header left out)."""
    try:
        text = (folder / "README.md").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    if text.startswith("---\n"):
        text = text.split("\n---\n", 1)[-1]
    return text.split("\n## ", 1)[0].strip()


def _number(value) -> str:
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def metric_cell(value) -> dict:
    """data-value, shown text and interval of a metric value."""
    if value["value"] is None or isinstance(value["value"], (dict, list)):
        return {"data": "", "shown": "\u2013", "interval": None}
    interval = value["interval"] and [f"{b:.2f}" for b in value["interval"]]
    return {"data": str(value["value"]), "shown": _number(value["value"]), "interval": interval}


def page(template: str, *, title: str, root: str = "", script: bool = False, csp: str = CSP,
         templates: Path | None = None, **context) -> bytes:
    """One page from a template of site_templates/ (or of `templates`, whose pages extend its base.html), autoescaped,
    with the site's Content-Security-Policy (or `csp`); `root` leads from the page to the site's folder (its style
    sheet and script). A name's bytes that are not UTF-8 (a lone surrogate) are shown escaped, never a failure
    half-way through the page."""
    text = _environment(templates).get_template(template).render(csp=csp, root=root, script=script, title=title,
                                                                  **context)
    return text.encode("utf-8", "backslashreplace")


def report_page(folder: Path, title: str, back: str, back_label: str, root: str) -> bytes:
    """FOLDER/index.html's bytes: FOLDER/report.md rendered by `safe_markdown`, with the folder's own plots."""
    images = {p.name for p in folder.iterdir() if p.suffix == ".png"}
    report = (folder / "report.md").read_text(encoding="utf-8")
    return page("report.html", title=title, root=root, back=back, back_label=back_label,
                report=safe_markdown(report, images))


def assets(site: Path) -> dict[Path, bytes]:
    """The site's style sheet and sort script, as files (nothing inline), by their paths in SITE."""
    return {site / asset: (TEMPLATES / asset).read_bytes() for asset in ASSETS}


def write_site(site: Path, benchmark, folder: Path, record: dict, results: list[dict]) -> None:
    """index.html, a page per scored submission (its cached report copied to submissions/<page>/)
    and the site's style sheet and script, into SITE, the leaderboard's staging folder (published whole)."""
    columns = record["columns"]
    labels = {h.key: h.label for h in get_task(benchmark.name).headline}
    rows, invalid = [], []
    for row, result in zip(record["submissions"], results):
        if row["status"] != "scored":
            invalid.append({"file": row["file"], "error": row["error"] or ""})
            continue
        submission = site / "submissions" / row["page"]
        shutil.copytree(site / "cache" / result["key"] / "report", submission)
        (submission / "index.html").write_bytes(report_page(submission, f"{benchmark.name}: {row['submission']}",
                                                            "../../index.html", f"{benchmark.name} leaderboard",
                                                            "../../"))
        rows.append({"name": row["submission"], "href": f"submissions/{row['page']}/index.html",
                     "cells": [metric_cell(row["values"][c]) for c in columns]})
    settings = record["settings"]
    summary = card_summary(folder)
    (site / "index.html").write_bytes(page(
        "index.html", title=f"{benchmark.name} leaderboard", script=True, benchmark=benchmark.name,
        split=str(record["split"]), data=record["data"], resamples=settings["bootstrap"], seed=settings["seed"],
        labels=[labels.get(c, c) for c in columns], rows=rows, invalid=invalid,
        summary=safe_markdown(summary) if summary else ""))
    for path, data in assets(site).items():
        path.write_bytes(data)
