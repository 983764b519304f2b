"""The README and the documentation site cannot go stale silently: every `vlbench` command line they
show names a command and options the CLI has, every `--flag` they name exists (in vlbench, or in the
other tool or bench script the page names, listed below), and the console blocks marked runnable run
against the demo's outputs (slow tier)."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import launch_chromium

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = "<!-- runnable -->"  # put on the line before a fenced console block that `make demo` makes runnable

# Flags of other tools that the pages name, with the tool: vLLM's server and engine (docs/models/vllm.md),
# lmms-eval's CLI (docs/guides/harness.md), MkDocs (`make docs`).
OTHER_TOOLS = {"--data-parallel-address": "vllm serve", "--data-parallel-rpc-port": "vllm serve",
               "--data-parallel-size-local": "vllm serve", "--distributed-executor-backend": "vllm serve",
               "--log_samples": "lmms-eval", "--reasoning_tags": "lmms-eval", "--reasoning-parser": "vllm serve",
               "--strict": "mkdocs build", "--requeue": "sbatch", "--dependency": "sbatch", "--array": "sbatch"}


def _cli_options() -> tuple[dict[str, set[str]], set[str]]:
    """{command: its --options} of the vlbench app (a group's commands by their path, `serve team add`), and the
    app's own options (--help included)."""
    import typer

    from pipelines.cli import app

    group = typer.main.get_command(app)

    def options(params) -> set[str]:
        return {o for p in params for o in [*p.opts, *getattr(p, "secondary_opts", [])] if o.startswith("--")}

    def commands(node, path: str) -> dict[str, set[str]]:
        if not hasattr(node, "commands"):
            return {path: options(node.params) | {"--help"}}
        return {name: found for sub, command in node.commands.items()
                for name, found in commands(command, f"{path} {sub}").items()}

    return ({name: found for sub, c in group.commands.items() for name, found in commands(c, sub).items()},
            options(group.params) | {"--help"})


def _command_path(words: list[str], commands: dict) -> str:
    """The command a line's words name: `serve team add`, or a group's default `run` where the next word is none
    of its commands (`vlbench serve CONFIG`)."""
    path = words[0]
    for word in words[1:]:
        if f"{path} {word}" in commands or any(c.startswith(f"{path} {word} ") for c in commands):
            path = f"{path} {word}"
        else:
            break
    return f"{path} run" if path not in commands and f"{path} run" in commands else path


def _bench_script_flags() -> set[str]:
    """The --flags of scripts/bench_*.py (docs/performance.md names them), read from their argparse calls."""
    flags = set()
    for script in (ROOT / "scripts").glob("bench_*.py"):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return flags


def _fenced_blocks(text: str):
    """(info string, the line before the fence, body) of each fenced code block."""
    lines, k = text.splitlines(), 0
    while k < len(lines):
        if lines[k].startswith("```"):
            end = next((j for j in range(k + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            yield lines[k][3:].strip(), lines[k - 1].strip() if k else "", "\n".join(lines[k + 1:end]) + "\n"
            k = end
        k += 1


def _command_lines(text: str) -> list[str]:
    """Every vlbench command line a page shows: the lines of its code blocks that start with `vlbench `
    (continuation lines joined, comments cut) and its inline code spans that do."""
    found = []
    for _, _, body in _fenced_blocks(text):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("vlbench "):
                found.append(line.split("  #", 1)[0])
    prose = re.sub(r"(?ms)^```.*?^```", "", text)
    found += [m.group(1) for m in re.finditer(r"`(vlbench [^`]+)`", prose)]
    return found


def _command_problems(text: str) -> tuple[list[str], int]:
    """What is wrong with the vlbench command lines of a page's text (a command or an option the CLI
    lacks), and how many command lines it checked."""
    commands, global_options = _cli_options()
    problems, seen = [], 0
    for line in _command_lines(text):
        command = line.split()[1]
        if command.startswith("-"):
            continue  # `vlbench --help`, `vlbench --allow-pickle-weights ...`
        seen += 1
        command = _command_path(line.split()[1:], commands)
        if command not in commands:
            problems.append(f"`{line}`: no command {command!r}")
            continue
        problems += [f"`{line}`: {command} has no option {flag}"
                     for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line)
                     if flag not in commands[command] | global_options]
    return problems, seen


def test_every_vlbench_command_line_in_the_docs_names_real_commands_and_options():
    problems, seen = [], 0
    for page in PAGES:
        found, checked = _command_problems(page.read_text())
        problems += [f"{page.relative_to(ROOT)}: {p}" for p in found]
        seen += checked
    assert not problems, "\n".join(problems)
    assert seen >= 60  # the pages show dozens of command lines: the parser found them


def test_every_flag_the_docs_name_exists():
    commands, global_options = _cli_options()
    known = set().union(*commands.values()) | global_options | set(OTHER_TOOLS) | _bench_script_flags()
    problems = []
    for page in PAGES:
        for flag in re.findall(r"`(--[a-z][a-z0-9_-]*)", page.read_text()):
            if flag not in known:
                problems.append(f"{page.relative_to(ROOT)}: {flag} is no option of vlbench or of a tool it names")
    assert not problems, "\n".join(sorted(set(problems)))


def test_a_renamed_option_or_command_would_be_caught():
    """The check is not vacuous: a page naming an option or a command the CLI lacks is reported."""
    page = ("```\nvlbench build gqa-ood --source s --out o \\\n    --legacy-jsn\n```\n"
            "Then `vlbench verfy gqa-ood` and `vlbench verify gqa-ood --against pub`.\n")
    problems, seen = _command_problems(page)
    assert seen == 3 and problems == ["`vlbench build gqa-ood --source s --out o      --legacy-jsn`: build has no "
                                      "option --legacy-jsn", "`vlbench verfy gqa-ood`: no command 'verfy'"]


def _runnable_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in PAGES:
        for info, before, body in _fenced_blocks(page.read_text()):
            if before == RUNNABLE:
                blocks.append((f"{page.relative_to(ROOT)}:{len(blocks)}", body))
    return blocks


def test_the_pages_mark_console_blocks_runnable():
    names = [name for name, _ in _runnable_blocks()]
    assert any(n.startswith("README.md") for n in names) and any(n.startswith("docs/") for n in names), names


@pytest.mark.slow
@pytest.mark.parametrize("name, body", _runnable_blocks(), ids=[n for n, _ in _runnable_blocks()])
def test_runnable_console_blocks_run_after_the_demo(name, body, demo_folder, page_env):
    """Each block marked runnable, line by line in a shell, in a folder holding the demo's outputs
    (`demo_out/`, as `make demo` leaves them): every command exits 0."""
    env = page_env
    for line in body.replace("\\\n", " ").splitlines():
        line = line.split("  #", 1)[0].strip().removeprefix("$ ")
        if not line:
            continue
        done = subprocess.run(["bash", "-c", line], cwd=demo_folder, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{name}: `{line}` exited {done.returncode}: {done.stderr[-2000:]}"


def _guide_block(marker: str, page: Path = ROOT / "docs" / "guides" / "challenge.md") -> str:
    return next(body for _, before, body in _fenced_blocks(page.read_text()) if before == marker)


@pytest.mark.slow
@pytest.mark.allow_hosts(["127.0.0.1"])
def test_the_challenge_guide_s_commands_run_as_written(demo_folder, page_env, tmp_path, socket_enabled):
    """The challenge guide's five commands in a folder laid out as `make demo` leaves it (the fixture ran the
    demo): its challenge.yaml, `seal`, `serve team add` (its token read from what it printed), `serve` (in its own
    process group on a free loopback port instead of 8000, stopped at the end) and the team's `submit`, each line as
    the guide writes it: the submission is scored."""
    import signal
    import socket

    from pipelines.serve.client import wait_for_service

    folder = tmp_path / "clone"
    folder.mkdir()
    (folder / "demo_out").symlink_to(demo_folder / "demo_out")
    (folder / "challenge.yaml").write_text(_guide_block("<!-- challenge.yaml -->"))
    lines = [line.split("  #", 1)[0].strip() for line in _guide_block("<!-- five commands -->").splitlines()]
    assert lines[0] == "make demo" and len(lines) == 5, lines  # the demo: run by the fixture
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    env = page_env

    def run(line: str) -> subprocess.CompletedProcess:
        done = subprocess.run(["bash", "-c", line], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"`{line}` exited {done.returncode}: {done.stderr[-2000:]}"
        return done

    run(lines[1])
    token = run(lines[2]).stdout.strip()
    assert token.startswith("vlb_")
    server = subprocess.Popen(["bash", "-c", "exec " + lines[3].replace("8000", port)], cwd=folder, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert wait_for_service(f"http://127.0.0.1:{port}", lambda: server.poll() is None), server.stdout.read()
        submit = lines[4].replace("8000", port).replace("VLBENCH_TOKEN=vlb_...", f"VLBENCH_TOKEN={token}")
        assert submit != lines[4]
        done = run(submit)
        assert "scored" in done.stdout and "accuracy" in done.stdout.lower(), done.stdout
        assert token.split("_", 2)[2] not in done.stdout + done.stderr
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(30)


@pytest.mark.slow
def test_the_scale_guide_s_slurm_and_kubernetes_scripts_run_as_written(demo_folder, page_env, tmp_path):
    """The sbatch array script run by bash once per array task with the variables Slurm sets (#SBATCH lines are
    comments to bash), the Kubernetes Job's container command once per index with JOB_COMPLETION_INDEX set, then
    the guide's merge step: each gives the bytes of one process's run of the same command."""
    import yaml

    page = ROOT / "docs" / "guides" / "scale.md"
    env = page_env
    job = yaml.safe_load(_guide_block("<!-- indexed job -->", page))
    container = job["spec"]["template"]["spec"]["containers"][0]
    count = job["spec"]["completions"]
    runs = {"slurm": [({"SLURM_ARRAY_TASK_ID": str(i), "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"},
                       ["bash", "-c", _guide_block("<!-- sbatch array -->", page)]) for i in range(4)],
            "kubernetes": [({"JOB_COMPLETION_INDEX": str(i)}, container["command"]) for i in range(count)]}
    merge = _guide_block("<!-- merge step -->", page).strip()
    for name, tasks in runs.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "demo_out").symlink_to(demo_folder / "demo_out")
        for variables, command in tasks:
            done = subprocess.run(command, cwd=folder, env={**env, **variables}, capture_output=True, text=True,
                                  timeout=600)
            assert done.returncode == 0, done.stderr[-2000:]
        done = subprocess.run(["bash", "-c", merge], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        whole = folder / "whole" / "preds.json"
        predict = shlex.split(_guide_block("<!-- sbatch array -->", page).strip().splitlines()[-1])
        predict[predict.index("--out") + 1] = str(whole)
        done = subprocess.run(predict[:predict.index("--shard")], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        for suffix in (".json", ".meta.json"):
            merged = (folder / "preds.json").with_suffix(suffix).read_bytes()
            assert merged == whole.with_suffix(suffix).read_bytes(), (name, suffix)


@pytest.fixture(scope="module")
def demo_folder(demo_run):
    """A folder laid out as the checkout after `make demo` (conftest's demo_run): `demo_out/` as the demo writes it,
    and the repository's `scripts/` (the pages run them from the checkout's root)."""
    assert demo_run.code == 0, demo_run.stderr
    return demo_run.folder


@pytest.fixture(scope="module")
def page_env(demo_run) -> dict:
    """The pages' shell: this venv's `vlbench` first on PATH, the demo's response cache."""
    return {**demo_run.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{demo_run.env['PATH']}"}


def mkdocs_build(out: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess:
    """`mkdocs build --strict` as `make docs` runs it (never --quiet: it hides the warnings --strict counts)."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "--site-dir",
                           str(out)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The documentation site built as `make docs` builds it (--strict), into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    done = mkdocs_build(out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_a_broken_link_fails_the_docs_build(tmp_path):
    """The check can fail: the same docs with one link to a page that does not exist abort the build (the
    strict build counts the warning; `--quiet` would hide it and exit 0), and the Makefile builds the same way."""
    import shutil

    assert "--quiet" not in (ROOT / "Makefile").read_text().split("\ndocs:", 1)[1].split("\n\n", 1)[0]
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    with open(tmp_path / "docs" / "index.md", "a") as page:
        page.write("\nSee [nowhere](no-such-page.md).\n")
    config = (ROOT / "mkdocs.yml").read_text()
    for local, moved in (("docs_dir: docs", f"docs_dir: {tmp_path / 'docs'}"),
                         ("- scripts/mkdocs_hooks.py", f"- {ROOT / 'scripts' / 'mkdocs_hooks.py'}"),
                         ("paths: [.]", f"paths: [{ROOT}]")):
        assert local in config
        config = config.replace(local, moved)
    (tmp_path / "mkdocs.yml").write_text(config)
    done = mkdocs_build(tmp_path / "site", tmp_path / "mkdocs.yml")
    assert done.returncode != 0 and "no-such-page.md" in done.stderr, done.stderr[-2000:]


def test_the_site_generates_its_reference_from_the_code(site):
    """The CLI reference lists every command with its options (typer's generator); a benchmark's page
    holds its parameter table with the dataclass's defaults; the contracts come from docstrings."""
    commands, _ = _cli_options()
    cli = (site / "reference" / "cli.html").read_text()
    assert all(f"vlbench {name.removesuffix(' run')}" in cli for name in commands) and "--legacy-json" in cli
    gqa = (site / "benchmarks" / "gqa-ood.html").read_text()
    assert "<code>alpha</code>" in gqa and "<code>0.2</code>" in gqa and "<code>tail_comparison</code>" in gqa
    contracts = (site / "reference" / "contracts.html").read_text()
    assert "check_invariants" in contracts and "locate_sources" in contracts


def test_the_site_loads_nothing_remote_in_headless_chromium(site, tmp_path):
    from test_leaderboard import CHROMIUM

    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (`make test` installs it: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    requests = []
    with sync_playwright() as p:
        browser = launch_chromium(p, CHROMIUM)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("request", lambda r: requests.append(r.url))
        page.goto((site / "index.html").as_uri())
        page.locator("article a", has_text="Benchmarks").first.click()  # links work opened from the disk
        page.wait_for_load_state("load")
        assert page.url.endswith("benchmarks/index.html") and page.title().startswith("Benchmarks")
        for name in ("benchmarks/vcr-visor.html", "guides/suite.html"):
            page.goto((site / name).as_uri())
            page.wait_for_load_state("load")
            assert page.title().endswith("vlbench")
        images = page.locator("article img")
        assert images.count() >= 1 and page.evaluate("img => img.naturalWidth", images.first.element_handle()) > 0
        page.screenshot(path=str(tmp_path / "suite-guide.png"))
        browser.close()
    assert requests and all(url.startswith("file://") for url in requests), [u for u in requests
                                                                               if not u.startswith("file://")]


def test_the_benchmark_table_is_written_once_and_lists_every_benchmark(site):
    """The README's table of benchmarks is the one table (the site's benchmarks page takes it from there), and it
    has a row for every registered benchmark, so a new benchmark adds one row and edits no count."""
    import re

    from builders.registry import benchmarks

    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"^\| `([a-z0-9-]+)`(?:, `([a-z0-9-]+)`)?", readme, re.M))
    assert {b.name for b in benchmarks()} == {n for pair in named for n in pair if n}
    assert "| name | paper |" not in (ROOT / "docs" / "benchmarks" / "index.md").read_text()
    page = (site / "benchmarks" / "index.html").read_text()
    assert all(f"<code>{b.name}</code>" in page for b in benchmarks())
