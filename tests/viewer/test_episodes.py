"""The episode browser over a run folder built here: listing, filters, episode pages, escaping, no hidden-test
leak, plots served only from the listing, the token, and the `flowsteer view` refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from flowsteer_mcp.viewer.episodes import episodes_app
from flowsteer_mcp.viewer.security import CONTENT_SECURITY_POLICY, session_cookie_value
from training.cli import main

HIDDEN = "HIDDEN_ASSERT_4711"  # text of a hidden test, as a sandbox's stderr or reason would echo it
HOSTILE = "<script>alert('pwned')</script>"
TOKEN = "viewer-test-token-0123456789"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def item(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "director": "direct",
        "problem_id": "gsm8k/1",
        "source": "gsm8k",
        "problem_type": "math",
        "answer": "42",
        "score": 1.0,
        "correct": True,
        "score_method": "exact_number",
        "score_details": {"rule": "bare", "gold": "42"},
        "workflow_id": "wf_1",
        "dsl": "Programmer",
        "finished": True,
        "turns": 1,
        "llm_calls": 1,
        "tokens": 50,
        "wall_s": 1.5,
        "trace": [{"node_id": "node_1", "operator": "Programmer", "ok": True, "output": "print(42)", "llm_calls": 1}],
    }
    return {**base, **fields}


HOSTILE_ITEM = item(
    director="template:pot",
    problem_id="humaneval/7",
    source="humaneval",
    problem_type="code",
    answer=HOSTILE,
    score=0.0,
    correct=False,
    score_method="sandbox",
    score_details={
        "test_kind": "check",
        "status": "failed",
        "passed": 1,
        "failed": 2,
        "total": 3,
        "isolation": "bwrap",
        "stderr_tail": f"AssertionError: assert candidate(7) == {HIDDEN}",
        "reason": f"assert candidate(7) == {HIDDEN}",
    },
    dsl="Custom -> Programmer",
    director_turns=[
        {"round": 1, "kind": "action", "sent": "<action>add</action><operator>ScEnsemble</operator>", "ok": False},
        {"round": 2, "kind": "action", "sent": f"<action>add</action><prompt>{HOSTILE}</prompt>", "ok": True},
    ],
    trace=[
        {"node_id": "node_1", "operator": "Custom", "ok": True, "output": "<b>plan</b>"},
        {"node_id": "node_2", "operator": "Programmer", "ok": False, "error": "<img src=x onerror=alert(1)>"},
    ],
)
OLD_ITEM = {k: v for k, v in item(problem_id="humaneval/9", source="humaneval").items() if k != "trace"}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """An evaluation folder: header, three items (one hostile, one from before traces), a half-written line,
    plots beside the journal and in plots/, and files that must never be served."""
    run = tmp_path / "run"
    (run / "plots").mkdir(parents=True)
    lines = [{"journal": 1, "config": {"directors": ["direct", "template:pot"]}}, item(), HOSTILE_ITEM, OLD_ITEM]
    text = "\n".join(json.dumps(line) for line in lines) + '\n{"director": "dir'
    (run / "items.jsonl").write_text(text, encoding="utf-8")
    (run / "summary.png").write_bytes(PNG)
    (run / "plots" / "rewards.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>', encoding="utf-8")
    (run / "notes.txt").write_text("not a plot", encoding="utf-8")
    (tmp_path / "outside.png").write_bytes(PNG)
    (run / "plots" / "escape.png").symlink_to(tmp_path / "outside.png")
    (run / "journal.png").symlink_to(run / "items.jsonl")
    return run


@pytest.fixture
def client(run_dir: Path) -> TestClient:
    return TestClient(episodes_app(run_dir))


def rows(page: str) -> list[str]:
    return re.findall(r'<tr class="episode (pass|fail)"[^>]*data-problem-id="([^"]*)"', page)


def test_index_lists_episodes_summary_and_plots(client: TestClient) -> None:
    page = client.get("/").text
    assert rows(page) == [("pass", "gsm8k/1"), ("fail", "humaneval/7"), ("pass", "humaneval/9")]
    assert all(f'href="episode/{n}"' in page for n in (1, 2, 3))
    assert 'data-director="template:pot" data-source="humaneval"' in page
    summary = page[page.index('id="summary"') : page.index('id="browse"')]
    assert "from items.jsonl" in summary and "template:pot" in summary
    assert re.findall(r'<img src="plots/([^"]+)"', page) == ["rewards.svg", "summary.png"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("dataset=humaneval", ["humaneval/7", "humaneval/9"]),
        ("director=direct&result=pass", ["gsm8k/1", "humaneval/9"]),
        ("result=fail", ["humaneval/7"]),
        ("dataset=gsm8k&result=fail", []),
        ("result=bogus", ["gsm8k/1", "humaneval/7", "humaneval/9"]),
    ],
)
def test_filters_by_dataset_director_and_result(client: TestClient, query: str, expected: list[str]) -> None:
    page = client.get(f"/?{query}").text
    assert [problem for _, problem in rows(page)] == expected
    assert f'<p id="count">{len(expected)} of 3 episodes</p>' in page


def test_episode_page_shows_graph_trace_answer_and_allowed_score_facts(client: TestClient) -> None:
    response = client.get("/episode/2")
    assert response.status_code == 200
    page = response.text
    graph = page[page.index('<div id="graph">') : page.index('<pre id="dsl">')]
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="workflow-graph"' in graph
    assert 'class="node failed" data-node-id="node_2"' in graph
    assert re.findall(r'<tr data-node-id="([^"]+)" class="(\w+)">', page) == [("node_1", "ok"), ("node_2", "failed")]
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page[page.index('<pre id="answer">') :]
    score = page[page.index('<section id="score"') : page.index("</section>", page.index('<section id="score"'))]
    assert 'class="fail"' in score
    for name, value in [("passed", "1"), ("failed", "2"), ("total", "3"), ("status", "failed"), ("isolation", "bwrap")]:
        assert f'<dd data-detail="{name}">{value}</dd>' in score


def test_untrusted_text_is_escaped_and_pages_carry_no_script(client: TestClient) -> None:
    page = client.get("/episode/2").text
    assert HOSTILE not in page and "<img src=x" not in page and "<b>plan</b>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script" not in page and "onerror=" not in page.replace("&lt;img src=x onerror=alert(1)&gt;", "")


def test_hidden_tests_never_reach_a_page(client: TestClient) -> None:
    pages = [client.get(path).text for path in ("/", "/episode/1", "/episode/2", "/episode/3")]
    for page in pages:
        assert HIDDEN not in page and "candidate(7)" not in page and "stderr" not in page
        assert 'data-detail="reason"' not in page
    assert "gold" not in pages[1]  # only the allow-listed score_details fields


def test_an_item_from_before_traces_still_opens(client: TestClient) -> None:
    page = client.get("/episode/3").text
    assert "No trace was recorded" in page and '<table id="trace">' in page


@pytest.mark.parametrize("number", [0, 4, 99])  # the header, the half-written line, past the end
def test_no_episode_outside_the_items(client: TestClient, number: int) -> None:
    assert client.get(f"/episode/{number}").status_code == 404


def test_the_folder_is_read_again_on_every_request(run_dir: Path, client: TestClient) -> None:
    assert len(rows(client.get("/").text)) == 3
    journal = run_dir / "items.jsonl"
    journal.write_text(journal.read_text().rsplit("\n", 1)[0] + "\n" + json.dumps(item(problem_id="gsm8k/2")) + "\n")
    assert [problem for _, problem in rows(client.get("/").text)][-1] == "gsm8k/2"


def test_report_json_gives_the_summary_while_it_matches_the_journal(run_dir: Path, client: TestClient) -> None:
    aggregate = {"director": "direct", "source": "gsm8k", "n": 1, "correct": 1, "score_mean": 1.0, "failures": 0}
    aggregate["ci"] = {"low": 0.21, "high": 1.0}
    report = {"aggregates": [aggregate], "items": [{}, {}, {}]}
    (run_dir / "report.json").write_text(json.dumps(report), encoding="utf-8")
    assert "from report.json" in client.get("/").text and "0.210–1.000" in client.get("/").text
    (run_dir / "report.json").write_text(json.dumps({**report, "items": [{}]}), encoding="utf-8")
    assert "from items.jsonl" in client.get("/").text  # a report older than the journal is not trusted


def test_security_headers_on_every_response(client: TestClient) -> None:
    for path in ("/", "/episode/1", "/episode/99", "/plots/summary.png", "/plots/notes.txt", "/static/viewer.css"):
        headers = client.get(path).headers
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"


def test_plots_are_served_only_from_the_listing(client: TestClient) -> None:
    png = client.get("/plots/summary.png")
    assert (png.status_code, png.headers["content-type"], png.content) == (200, "image/png", PNG)
    assert client.get("/plots/rewards.svg").headers["content-type"].startswith("image/svg+xml")
    for name in (
        "notes.txt",
        "items.jsonl",
        "..%2Fitems.jsonl",
        "..%2F..%2Foutside.png",
        "escape.png",
        "journal.png",
        "nope.png",
    ):
        assert client.get(f"/plots/{name}").status_code == 404, name
    assert client.get("/plots/../items.jsonl").status_code == 404


def test_a_training_run_shows_its_metrics_and_plots(tmp_path: Path) -> None:
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "summary.png").write_bytes(PNG)
    steps = [{"step": 1, "reward/total": -1.0, "loss/kl": 0.0}, {"step": 2, "reward/total": -0.5, "loss/kl": 0.02}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps), encoding="utf-8")
    page = TestClient(episodes_app(tmp_path)).get("/").text
    assert "training run: 2 steps" in page
    assert (
        '<tr data-metric="reward/total"><td>reward/total</td><td>-1</td><td>-0.5</td><td>-1</td><td>-0.5</td>' in page
    )
    assert '<img src="plots/summary.png"' in page


def test_with_a_token_every_data_route_needs_it(run_dir: Path) -> None:
    client = TestClient(episodes_app(run_dir, token=TOKEN))
    for path in ("/", "/episode/2", "/plots/summary.png"):
        refused = client.get(path)
        assert refused.status_code == 401 and HOSTILE not in refused.text and "humaneval" not in refused.text
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/static/viewer.css").status_code == 200  # the sign-in shell's own files
    shell = client.get("/", headers={"Accept": "text/html"})
    assert shell.status_code == 401 and '<script src="/static/viewer.js"' in shell.text
    assert 'id="episodes"' not in shell.text and "humaneval" not in shell.text


def test_signing_in_sets_a_cookie_that_is_not_the_token(run_dir: Path) -> None:
    client = TestClient(episodes_app(run_dir, token=TOKEN))
    assert client.post("/session", headers={"Authorization": "Bearer wrong"}).status_code == 401
    signed_in = client.post("/session", headers={"Authorization": f"Bearer {TOKEN}"})
    assert signed_in.status_code == 204
    assert signed_in.cookies["flowsteer_view"] == session_cookie_value(TOKEN) != TOKEN
    assert client.get("/episode/1").status_code == 200  # the client now sends the cookie


def test_view_refuses_a_folder_that_is_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert "is not a run folder" in error and "items.jsonl" in error


def test_view_refuses_a_public_bind_without_token(
    run_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLOWSTEER_MCP_TOKEN", raising=False)
    assert main(["view", str(run_dir), "--host", "0.0.0.0"]) == 2
    captured = capsys.readouterr()
    assert "Refusing to listen on 0.0.0.0" in captured.err and "episodes:" not in captured.out


def test_a_policy_directors_turns_show_what_it_sent_and_what_the_canvas_refused(client: TestClient) -> None:
    page = client.get("/episode/2").text
    turns = page[page.index('<ol id="turns">') : page.index("</ol>", page.index('<ol id="turns">'))]
    assert re.findall(r'<li class="(\w+)" data-round="(\d+)">', turns) == [("refused", "1"), ("accepted", "2")]
    assert "&lt;operator&gt;ScEnsemble&lt;/operator&gt;" in turns and HOSTILE not in turns
    assert 'id="turns"' not in client.get("/episode/1").text  # direct sends no turns: no section
