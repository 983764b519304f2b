"""CircularEval (`predict --circular`, evaluator/models/ask.py; the report: evaluator/stats/circular.py).

Two loopback OpenAI-compatible servers answer COSIM-Q's sample rows by letter: one always says "A" (the
extreme of position bias), one reads the options it is shown and names the right one wherever it sits.
The goldens are hand-derived from the split's labels: the "A" server is plainly right exactly where the
right choice is listed first, never right under every rotation, and chooses A in 100% of asks; the
reader is right everywhere, plainly and circularly, choosing each letter in a quarter of the asks.
"""

from __future__ import annotations

import json

import pytest
from helpers import assert_one_error_line
from served_helpers import LoopbackServer

from core.errors import ModelError
from evaluator.models.ask import check_circular, rotated

pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])
LETTERS = "ABCD"


@pytest.fixture(autouse=True)
def _no_network():
    """Overrides conftest's: sockets may be made, and connect to loopback only (the module's mark)."""
    yield


class LetterServer(LoopbackServer):
    """Answers a letter prompt with "A", or, given `right` ({the set of a prompt's options: the right one}),
    with the letter of the right option wherever it is shown."""

    def __init__(self, right: dict[frozenset, str] | None = None):
        super().__init__()
        self.right, self.requests = right, 0

    def answer(self, path, body, headers):
        self.requests += 1
        text = json.loads(body)["messages"][-1]["content"][-1]["text"]
        letter = "A"
        if self.right is not None:
            options = [line[3:] for line in text.splitlines() if line[:3] in {f"{c}. " for c in LETTERS}]
            letter = LETTERS[options.index(self.right[frozenset(options)])]
        payload = {"id": "x", "object": "chat.completion", "model": "letters",
                   "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                                                 "content": letter}}]}
        return 200, json.dumps(payload).encode(), {}


def run_circular(cli, cosim, server, out, *extra):
    folder, images, _ = cosim
    code, _, err = cli("predict", "cosim-q", "--data", folder, "--images", images, "--model", "openai:letters",
                       "--base-url", server.url, "--out", out, "--circular", *extra)
    assert code == 0, err
    code, stdout, err = cli("evaluate", "cosim-q", "--data", folder, "--predictions", out, "--bootstrap", "200",
                            "--report", out.parent / f"{out.stem}-report")
    assert code == 0, err
    return json.loads((out.parent / f"{out.stem}-report" / "metrics.json").read_text())


def test_rotations_list_option_r_first():
    assert rotated(["a", "b", "c", "d"], 0) == ["a", "b", "c", "d"]
    assert rotated(["a", "b", "c", "d"], 3) == ["d", "a", "b", "c"]


def test_a_model_that_always_says_a_is_never_circularly_right(cli, cosim, tmp_path, monkeypatch):
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    _, _, table = cosim
    labels = table.column("label").to_pylist()
    with LetterServer() as server:
        metrics = run_circular(cli, cosim, server, tmp_path / "a.json")
        assert server.requests == 4 * table.num_rows  # one ask per rotation of the four choices
    report = metrics["circular"]
    assert report["prompts"] == table.num_rows and report["asks"] == 4 * table.num_rows
    assert report["circular_accuracy"]["value"] == 0
    assert report["plain_accuracy"]["value"] == round(100 * sum(x == 0 for x in labels) / len(labels), 4)
    assert report["letters"]["A"]["chosen"]["value"] == 100
    assert all(report["letters"][c]["right"]["value"] == 25 for c in LETTERS)  # full rotation: 1/4 each
    assert report["letters"]["A"]["accuracy_when_right"]["value"] == 100
    assert report["letters"]["B"]["accuracy_when_right"]["value"] == 0
    lo, hi = report["plain_accuracy"]["interval"]
    assert lo < report["plain_accuracy"]["value"] < hi
    assert metrics["accuracy"] == 0  # the file holds the circular answers: all rotations disagree, all wrong
    assert "## CircularEval" in (tmp_path / "a-report" / "report.md").read_text()
    record = json.loads((tmp_path / "a.meta.json").read_text())
    assert record["asked"]["circular"]["asks"] == 4 * table.num_rows
    assert record["asked"]["circular"]["consistent_prompts"] == 0


def test_a_model_that_reads_the_options_is_right_in_every_rotation(cli, cosim, tmp_path, monkeypatch):
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    _, _, table = cosim
    right = {}
    for choices, label in zip(table.column("choices").to_pylist(), table.column("label").to_pylist()):
        assert right.setdefault(frozenset(choices), choices[label]) == choices[label]  # each option set: one answer
    with LetterServer(right) as server:
        metrics = run_circular(cli, cosim, server, tmp_path / "r.json")
        asked = server.requests
        again = run_circular(cli, cosim, server, tmp_path / "again.json")  # every rotation from the cache
        assert server.requests == asked
    report = metrics["circular"]
    assert report["circular_accuracy"]["value"] == report["plain_accuracy"]["value"] == 100
    assert all(report["letters"][c]["chosen"]["value"] == 25 for c in LETTERS)
    assert metrics["accuracy"] == 100 and again["circular"] == report
    rotations = json.loads((tmp_path / "r.rotations.json").read_text())["rows"]
    assert [r["prompts"] for r in rotations] == [[[label] * 4] for label in table.column("label").to_pylist()]


@pytest.mark.parametrize("bench,extra,needle", [
    ("vqa-v2", (), "--circular: the benchmark is not multiple choice"),
    ("socialiq", (), "--circular:"),
    ("cosim-q", ("--choice-mode", "loglik"), "--circular rotates the options of a letter choice"),
    ("cosim-q", ("--model", "baseline:random"), "--circular: baseline:random does not read it"),
])
def test_circular_where_it_cannot_apply_is_one_line(bench, extra, needle, cli, built, tmp_path):
    model = () if "--model" in extra else ("--model", "openai:m", "--base-url", "http://127.0.0.1:9/v1")
    code, _, err = cli("predict", bench, "--data", built(bench), "--out", tmp_path / "p.json", "--circular",
                       *model, *extra)
    assert_one_error_line(code, err, [needle])
    assert not any(tmp_path.iterdir())


def test_the_check_reads_the_ask():
    from evaluator.paired import ChoiceLikelihood

    check_circular(ChoiceLikelihood("{q}", ("q",), ("q",)), "letter")
    with pytest.raises(ModelError, match="log-likelihood"):
        check_circular(ChoiceLikelihood("{q}", ("q",), ("q",)), "loglik")


def test_the_report_card_shows_position_bias(cosim, tmp_path, monkeypatch):
    from evaluator.models.options import ModelOptions
    from evaluator.suite.run import run_suite

    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    folder, images, table = cosim
    with LetterServer() as server:
        card = run_suite("openai:letters", folder.parent, tmp_path / "card", only=["cosim-q"], perceptual=False,
                         counterbias=False, resamples=0, echo=lambda *_: None,
                         model_options=ModelOptions(base_url=server.url, circular=True, images=images))
    assert card["benchmarks"]["cosim-q"]["status"] == "scored", card["benchmarks"]["cosim-q"]
    assert card["benchmarks"]["cosim-q"]["circular"]["letters"]["A"]["chosen"]["value"] == 100
    report = (tmp_path / "card" / "report.md").read_text()
    assert "## Position bias (CircularEval)" in report and "| cosim-q | 0.00 |" in report
    assert "100.00 / 0.00 / 0.00 / 0.00" in (tmp_path / "card" / "index.html").read_text()
