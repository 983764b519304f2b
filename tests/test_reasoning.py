"""Reasoning models: thinking separated from the answer on every backend (evaluator/models/reasoning.py).

The reading rules are checked on hand-written outputs in each family's style (the markers come from the
families' chat templates: Qwen3-VL-Thinking's generation prompt ends with `<think>`, Kimi-VL-Thinking
writes `◁think▷`, GLM-4.1V-Thinking wraps its answer in `<answer>`). End to end, a loopback
OpenAI-compatible server answers every VQA v2 question of the sample build with its gold answer, in
each reasoning style a server produces (thinking in the content with either family's markers, only the
closing marker, a `reasoning_content` or `reasoning` field, an answer cut off while thinking): the
scores equal the plain answers' scores, and the unfinished answers are counted and scored wrong.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from helpers import assert_one_error_line
from served_helpers import LoopbackServer

from core.errors import ParamsError
from evaluator.models.reasoning import DEFAULT_TAGS, Reasoning, Reply, parse_reasoning_tags, served_output
from evaluator.models.template_kwargs import parse_template_kwargs

pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])
KIMI_OPEN, KIMI_CLOSE = "\u25c1think\u25b7", "\u25c1/think\u25b7"


@pytest.fixture(autouse=True)
def _no_network():
    """Overrides conftest's: sockets may be made, and connect to loopback only (the module's mark)."""
    yield


@pytest.mark.parametrize("output,opened,reply", [
    ("yes", None, Reply("yes")),  # a plain answer
    ("<think>\nThe sign is red.\n</think>\n\nyes", None, Reply("\n\nyes", "\nThe sign is red.\n")),
    (f"{KIMI_OPEN}Two dogs.{KIMI_CLOSE}2", None, Reply("2", "Two dogs.")),  # Kimi-VL-Thinking
    ("<thinking>hm</thinking>blue", None, Reply("blue", "hm")),
    ("The template opened it.\n</think>\n\nred", None, Reply("\n\nred", "The template opened it.\n")),
    ("Let me look", "<think>", Reply(None, "Let me look")),  # opened by the template, cut off
    ("Let me look</think>no", "<think>", Reply("no", "Let me look")),
    ("<think>I count the people and", None, Reply(None, "I count the people and")),  # cut off: unfinished
    ("<think>a</think>first<think>again", None, Reply(None, "again")),  # a second block never closed
    ("<think>a</think><answer>Paris</answer>", None, Reply("Paris", "a")),  # GLM-4.1V-Thinking
    ("<think>a</think>The answer is <|begin_of_box|>3<|end_of_box|>", None, Reply("3", "a")),  # GLM-4.5V
    ("", None, Reply("")),
])
def test_thinking_is_separated_by_the_documented_rules(output, opened, reply):
    assert Reasoning().split(output, opened) == reply


def test_the_prompt_says_when_the_template_opened_the_block():
    reasoning = Reasoning()
    assert reasoning.opened_by("<|im_start|>assistant\n<think>\n") == "<think>"
    # Qwen3 with enable_thinking=false writes an empty, closed block: the answer starts outside it
    assert reasoning.opened_by("<|im_start|>assistant\n<think>\n\n</think>\n\n") is None
    assert reasoning.opened_by("USER: <image>\nwhat? ASSISTANT:") is None


def test_custom_tags_replace_the_defaults():
    reasoning = Reasoning(parse_reasoning_tags(["[[plan]],[[/plan]]"]))
    assert reasoning.split("[[plan]]x[[/plan]]cat") == Reply("cat", "x")
    assert reasoning.split("<think>x</think>cat") == Reply("<think>x</think>cat")  # not its markers
    assert parse_reasoning_tags([]) is None and Reasoning().tags == DEFAULT_TAGS


@pytest.mark.parametrize("value", ["<think>", "<think>,", ",</think>", "a,b,c", "x,x", "<think>,<think>x",
                                   "\x1b[2J,</think>", "<t>," + "x" * 65])
def test_malformed_reasoning_tags_are_refused(value):
    with pytest.raises(ParamsError, match="--reasoning-tags"):
        parse_reasoning_tags([value])


def test_a_served_reasoning_field_is_put_back_before_the_answer():
    assert served_output("yes", "I see a sign.", True, DEFAULT_TAGS) == "<think>I see a sign.</think>yes"
    assert served_output("", "I see", False, DEFAULT_TAGS) == "<think>I see"  # cut off: left open
    assert Reasoning().split(served_output("", "I see", False, DEFAULT_TAGS)).unfinished
    assert served_output("yes", None, True, DEFAULT_TAGS) == "yes"


@pytest.mark.parametrize("reasoning", ["Maybe.</think> B", "Hmm \u25c1/think\u25b7 C", "</thinking>A</think>B"])
def test_a_reply_cut_off_by_its_budget_is_unfinished_whatever_its_reasoning_field_holds(reasoning):
    """finish_reason `length` with no content: the budget ran out while thinking, so there is no answer, even
    when the reasoning field holds a closing marker and a letter after it (before: read as the answer B)."""
    output = served_output("", reasoning, False, DEFAULT_TAGS)
    assert Reasoning().split(output).unfinished
    assert Reasoning().split(served_output("B", reasoning, True, DEFAULT_TAGS)).answer == "B"  # finished: as before


def test_chat_template_switches_are_typed_and_checked():
    assert parse_template_kwargs(["enable_thinking=false", "budget=128", "style=short"]) == (
        ("enable_thinking", False), ("budget", 128), ("style", "short"))
    for bad, needle in ((["enable_thinking"], "KEY=VALUE"), (["=1"], "KEY=VALUE"), (["a=1", "a=2"], "twice"),
                        (["add_generation_prompt=false"], "set by vlbench")):
        with pytest.raises(ParamsError, match=needle):
            parse_template_kwargs(bad)


# ---------------------------------------------------------------------------------------------
# End to end: a served model answering with the gold answers in every reasoning style

STYLES = ("plain", "think", "kimi", "closing-only", "reasoning_content", "reasoning", "glm")


class GoldServer(LoopbackServer):
    """Answers each VQA question (found by its prompt's text and image) with its gold answer, in `style`;
    the questions in `cut` are cut off inside their thinking (finish_reason "length")."""

    def __init__(self, gold: dict[str, str], style: str, cut: frozenset[str] = frozenset(), field: bool = False):
        super().__init__()
        self.gold, self.style, self.cut, self.field, self.requests = gold, style, cut, field, []

    def answer(self, path, body, headers):
        request = json.loads(body)
        self.requests.append(request)
        text = request["messages"][-1]["content"][-1]["text"]
        question = text.split("\n", 1)[0]
        gold, thinking = self.gold[question], f"The question is {question!r}; I look at the picture."
        message, finish = {"role": "assistant"}, "stop"
        if question in self.cut:
            finish = "length"
            message |= ({"content": None, "reasoning_content": thinking} if self.field else
                        {"content": f"<think>\n{thinking} and then"})
        else:
            message["content"] = {
                "plain": gold, "think": f"<think>\n{thinking}\n</think>\n\n{gold}",
                "kimi": f"{KIMI_OPEN}{thinking}{KIMI_CLOSE}{gold}", "closing-only": f"{thinking}\n</think>\n\n{gold}",
                "reasoning_content": gold, "reasoning": gold,
                "glm": f"<think>{thinking}</think><answer>{gold}</answer>",
            }[self.style]
            if self.style in ("reasoning_content", "reasoning"):
                message[self.style] = thinking
        payload = {"id": "x", "object": "chat.completion", "model": "gold-thinker",
                   "choices": [{"index": 0, "finish_reason": finish, "message": message}]}
        return 200, json.dumps(payload).encode(), {}


def _gold(built) -> dict[str, str]:
    """question -> its most frequent annotator answer (VQA v2's `multiple_choice_answer`; a question text asked of
    several images: its first row's)."""
    folder = built("vqa-v2")
    table = pq.read_table(next(folder.glob("default/validation-*.parquet")))
    gold: dict[str, str] = {}
    for r in table.select(["question", "multiple_choice_answer"]).to_pylist():
        gold.setdefault(r["question"], r["multiple_choice_answer"])
    return gold


def _predict_and_score(cli, built, images, server, tmp_path, name):
    folder, out = built("vqa-v2"), tmp_path / f"{name}.json"
    code, _, err = cli("predict", "vqa-v2", "--data", folder, "--images", images, "--model", "openai:gold-thinker",
                       "--base-url", server.url, "--out", out, "--no-cache", "--log-samples")
    assert code == 0, err
    code, stdout, err = cli("evaluate", "vqa-v2", "--data", folder, "--predictions", out, "--bootstrap", "0")
    assert code == 0, err
    record = json.loads(out.with_suffix(".meta.json").read_text())
    return json.loads(stdout)["accuracy"], record, out


def test_every_reasoning_style_scores_as_the_plain_answers(cli, built, sample_sources, tmp_path):
    gold = _gold(built)
    scores = {}
    for style in STYLES:
        with GoldServer(gold, style) as server:
            scores[style], record, out = _predict_and_score(cli, built, sample_sources / "coco", server, tmp_path,
                                                            style)
        assert record["asked"]["unfinished_answers"] == 0
        if style != "plain":  # the raw output, thinking included, stays in --log-samples
            sample = json.loads(out.with_suffix(".samples.jsonl").read_text().splitlines()[0])
            assert "I look at the picture" in sample["output"] and sample["unfinished"] is False
    assert scores["plain"] > 0
    assert all(scores[s] == scores["plain"] for s in STYLES), scores


@pytest.mark.parametrize("field", [False, True], ids=["in-content", "reasoning_content"])
def test_answers_cut_off_while_thinking_are_unfinished_and_wrong(field, cli, built, sample_sources, tmp_path):
    gold = _gold(built)
    cut = frozenset(sorted(gold)[:2])
    with GoldServer(gold, "think", cut, field) as server:
        accuracy, record, out = _predict_and_score(cli, built, sample_sources / "coco", server, tmp_path, "cut")
    assert record["asked"]["unfinished_answers"] == len(cut)
    samples = [json.loads(line) for line in out.with_suffix(".samples.jsonl").read_text().splitlines()]
    assert sum(s["unfinished"] for s in samples) == len(cut)
    assert all(s["prediction"] == "" and s["parsed"] is False for s in samples if s["unfinished"])
    # the expected score: the gold answers with the cut-off questions answered by nothing, scored from a file
    predictions = json.loads(out.read_text())
    expected_file = tmp_path / "expected.json"
    folder = built("vqa-v2")
    table = pq.read_table(next(folder.glob("default/validation-*.parquet"))).select(["question_id", "question"])
    cut_ids = {r["question_id"] for r in table.to_pylist() if r["question"] in cut}
    with GoldServer(gold, "plain") as server:
        _, _, plain_out = _predict_and_score(cli, built, sample_sources / "coco", server, tmp_path, "plain")
    expected_file.write_text(json.dumps([{**p, "answer": "" if p["question_id"] in cut_ids else p["answer"]}
                                         for p in json.loads(plain_out.read_text())]))
    code, stdout, err = cli("evaluate", "vqa-v2", "--data", folder, "--predictions", expected_file, "--bootstrap", "0")
    assert code == 0, err
    assert accuracy == json.loads(stdout)["accuracy"] < json.loads(
        cli("evaluate", "vqa-v2", "--data", folder, "--predictions", plain_out, "--bootstrap", "0")[1])["accuracy"]
    assert len(predictions) == len(table)


def test_template_switches_reach_the_server_and_the_record(cli, built, sample_sources, tmp_path):
    gold = _gold(built)
    with GoldServer(gold, "think") as server:
        out = tmp_path / "p.json"
        code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco",
                           "--model", "openai:gold-thinker",
                           "--base-url", server.url, "--out", out, "--no-cache", "--chat-template-kwarg",
                           "enable_thinking=true")
        assert code == 0, err
        assert all(r["chat_template_kwargs"] == {"enable_thinking": True} for r in server.requests)
        assert all(r["max_tokens"] == 4096 for r in server.requests)  # the thinking budget's default
    record = json.loads(out.with_suffix(".meta.json").read_text())
    assert record["reasoning"]["thinking"] is True
    assert record["reasoning"]["chat_template_kwargs"] == {"enable_thinking": True}


@pytest.mark.parametrize("args,needle", [
    (["--reasoning-tags", "<think>"], "--reasoning-tags"),
    (["--reasoning-tags", ""], "--reasoning-tags"),
    (["--chat-template-kwarg", "enable_thinking"], "--chat-template-kwarg"),
])
def test_bad_reasoning_options_are_one_line_and_write_nothing(args, needle, cli, built, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--model", "openai:m", "--base-url",
                       "http://127.0.0.1:9/v1", "--out", out, *args)
    assert_one_error_line(code, err, [needle])
    assert not any(tmp_path.iterdir())


def test_the_report_card_shows_unfinished_answers_per_benchmark(built, sample_sources, tmp_path):
    from evaluator.models.options import ModelOptions
    from evaluator.suite.run import run_suite

    gold = _gold(built)
    cut = frozenset(sorted(gold)[:3])
    folder = built("vqa-v2")
    with GoldServer(gold, "think", cut) as server:
        card = run_suite("openai:gold-thinker", folder.parent, tmp_path / "card", only=["vqa-v2"],
                         images_root=sample_sources, perceptual=False, counterbias=False, resamples=0,
                         model_options=ModelOptions(base_url=server.url, chat_template_kwargs=(
                             ("enable_thinking", True),)), echo=lambda *_: None)
    table = pq.read_table(next(folder.glob("default/validation-*.parquet")))
    cut_rows = sum(q in cut for q in table.column("question").to_pylist())
    assert card["benchmarks"]["vqa-v2"]["answers"] == {"thinking": True, "unfinished": cut_rows,
                                                      "unparsed": cut_rows, "rows": table.num_rows}
    report = (tmp_path / "card" / "report.md").read_text()
    assert "## Generated answers" in report
    assert f"| vqa-v2 | on | {cut_rows} | {cut_rows} | {table.num_rows} |" in report
    assert f"<td>{cut_rows}</td>" in (tmp_path / "card" / "index.html").read_text()
