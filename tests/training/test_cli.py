"""The `flowsteer` command: argument handling, delegation, and `eval` end to end on a scripted executor."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from flowsteer_mcp.director.library import DEFAULT_WORKFLOW, library_workflow
from tests.support.openai_stub import OpenAIStub, StubReply
from tests.support.servers import HttpServerProcess, free_port
from training.cli import main

SCRIPTED_CONFIG = """
[executor]
model = "script"

[models.script]
backend = "scripted"
replies = ["Final answer: 16", "Final answer: 29", "Final answer: 7"]
default_reply = "Final answer: 29"
"""

PROBLEMS = [
    {"id": "toy/1", "source": "gsm8k", "problem_type": "math", "problem": "What is 8 + 8?", "ground_truth": "16"},
    {"id": "toy/2", "source": "gsm8k", "problem_type": "math", "problem": "What is 20 + 9?", "ground_truth": "29"},
    {"id": "toy/3", "source": "nq", "problem_type": "qa", "problem": "Who wrote Emma?", "ground_truth": "Jane Austen"},
]


@pytest.fixture(autouse=True)
def hermetic_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("FLOWSTEER_CONFIG", "FLOWSTEER_EXECUTOR_MODEL", "FLOWSTEER_EXECUTOR_BACKEND"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("FLOWSTEER_EXECUTOR_BASE_URL", raising=False)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "executor.toml").write_text(SCRIPTED_CONFIG, encoding="utf-8")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for record in PROBLEMS), encoding="utf-8")
    return tmp_path


def base_args(workspace: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "--data",
        str(workspace / "data.jsonl"),
        "--config",
        str(workspace / "executor.toml"),
        "--no-progress",
        *extra,
    ]


def test_eval_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--data", "--director", "--policy-url", "--concurrency", "--record", "--replay", "--seed", "--out"):
        assert option in text


def test_top_level_help_and_missing_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "eval" in capsys.readouterr().out
    assert main([]) == 2
    assert "required" in capsys.readouterr().err
    assert main(["bogus"]) == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--director", "oracle"], "invalid choice: 'oracle'"),
        (["--director", "direct", "--concurrency", "0"], "must be at least 1"),
        (["--director", "direct", "--limit", "many"], "expected a whole number"),
        (["--director", "direct", "--director", "direct"], "--director direct given more than once"),
        (["--director", "policy", "--policy-url", "http://127.0.0.1:1/v1"], "--policy-model go together"),
        (
            [
                "--director",
                "policy",
                "--policy-url",
                "http://127.0.0.1:1/v1",
                "--policy-model",
                "m",
                "--policy-serve",
                "local",
            ],
            "drop it with --policy-url",
        ),
        (["--director", "direct", "--policy-serve", "local"], "only used with --director policy"),
        (["--director", "direct", "--policy-url", "http://127.0.0.1:1/v1"], "only used with --director policy"),
        (["--director", "direct", "--record", "a", "--replay", "b"], "not allowed with argument"),
        (["--director", "template", "--mcp-url", "http://127.0.0.1:1/mcp", "--record", "a"], "drop --mcp-url"),
        (["--director", "template", "--mcp-url", "ftp://x"], "must be an http(s) URL"),
        (["--director", "direct", "--episode-timeout", "-1"], "must be positive"),
        (["--director", "direct", "--sources", ","], "expected comma-separated source names"),
        (["--director", "direct", "--skip", "-1"], "must be at least 0"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(
    workspace: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(base_args(workspace, *extra)) == 2
    assert message in capsys.readouterr().err


def test_missing_data_argument(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--director", "direct"]) == 2
    assert "--data" in capsys.readouterr().err


def test_unusable_inputs_exit_2_before_running(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--data", str(workspace / "nope.jsonl"), "--director", "direct", "--no-progress"]) == 2
    assert "dataset path does not exist" in capsys.readouterr().err
    assert main(base_args(workspace, "--director", "direct", "--sources", "mbpp")) == 2
    assert "no problems found" in capsys.readouterr().err
    (workspace / "bad.toml").write_text("[executor]\nmodel = 'x'\n", encoding="utf-8")
    args = ["eval", "--data", str(workspace / "data.jsonl"), "--config", str(workspace / "bad.toml")]
    assert main([*args, "--director", "direct", "--no-progress"]) == 2
    assert "missing required key 'models'" in capsys.readouterr().err
    assert main(base_args(workspace, "--director", "direct", "--replay", str(workspace / "missing.jsonl"))) == 2
    assert "recording file not found" in capsys.readouterr().err


def test_train_needs_a_config_and_reports_config_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train"]) == 2
    assert "--config" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: {steps: 0}\n", encoding="utf-8")
    assert main(["train", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "run.steps" in err and "policy: Field required" in err


def test_train_check_prints_the_resolved_preset(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    assert main(["train", "--config", "configs/cpu-smoke.yaml", "--check", "--set", "run.steps=5"]) == 0
    assert "steps: 5" in capsys.readouterr().out


def test_models_without_a_subcommand_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 2
    assert "flowsteer models prepare NAME" in capsys.readouterr().err


def test_solve_is_delegated_with_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    received: list[list[str]] = []
    stand_in = types.ModuleType("flowsteer_mcp.director.solve")

    def solve_main(argv: list[str], serve_director: object = None) -> int:  # test double for the real command
        received.append(argv)
        assert serve_director is not None  # flowsteer solve can serve the shipped director
        return 0

    stand_in.solve_main = solve_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flowsteer_mcp.director.solve", stand_in)
    assert main(["solve", "What is 2+2?", "--task-type", "math"]) == 0
    assert received == [["What is 2+2?", "--task-type", "math"]]


def read_items(folder: Path) -> list[dict[str, Any]]:
    document = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    items: list[dict[str, Any]] = document["items"]
    return items


def comparable(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    keys = (
        "director",
        "problem_id",
        "answer",
        "score",
        "dsl",
        "turns",
        "llm_calls",
        "tokens",
        "policy_tokens",
        "error",
    )
    return [tuple(item[key] for key in keys) for item in items]


def test_skip_leaves_out_each_sources_first_problems(workspace: Path) -> None:
    out = workspace / "training-items"
    assert main(base_args(workspace, "--director", "direct", "--skip", "1", "--out", str(out))) == 0
    assert [item["problem_id"] for item in read_items(out)] == ["toy/2"]  # nq's only problem is its first
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["config"]["skip"] == 1


def test_eval_end_to_end_then_replay(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recording = workspace / "run.jsonl"
    first = workspace / "first"
    args = ["--director", "direct", "--director", "template", "--seed", "11", "--concurrency", "3"]
    assert main(base_args(workspace, *args, "--record", str(recording), "--out", str(first))) == 0
    printed = capsys.readouterr().out
    assert "### gsm8k (math)" in printed and "### nq (qa)" in printed
    assert "| direct |" in printed and "| template |" in printed
    assert "template vs direct, paired on the same 2 problems:" in printed
    assert printed == (first / "report.md").read_text(encoding="utf-8")
    document = json.loads((first / "report.json").read_text(encoding="utf-8"))
    assert document["config"]["seed"] == 11 and document["config"]["directors"] == ["direct", "template"]
    items = document["items"]
    assert len(items) == 6 and all(item["error"] is None for item in items)
    assert {item["dsl"] for item in items if item["director"] == "template"} >= {
        library_workflow("qa", DEFAULT_WORKFLOW["qa"]).dsl()
    }
    assert recording.stat().st_size > 0

    second = workspace / "second"
    assert main(base_args(workspace, *args, "--replay", str(recording), "--out", str(second))) == 0
    assert comparable(read_items(second)) == comparable(items)
    assert "Replayed offline from" in capsys.readouterr().out


def policy_reply(body: dict[str, Any]) -> StubReply:
    """Scripted policy test double: prompt turns get a prompt, action turns add Custom then try to finish."""
    messages = body["messages"]
    if messages[0]["role"] != "system":
        return StubReply(content="Answer with the final number only.")
    if "Custom" in messages[-1]["content"].split("Current workflow")[-1]:
        return StubReply(content="<action>finish</action>")
    return StubReply(content="<action>add</action><operator>Custom</operator>")


def test_policy_director_records_and_replays(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recording = workspace / "policy-run.jsonl"
    args = ["--director", "policy", "--sources", "gsm8k", "--limit", "1", "--episode-timeout", "60"]
    with OpenAIStub(responder=policy_reply, served_models=["stub-policy"]) as stub:
        policy = ["--policy-url", stub.base_url, "--policy-model", "stub-policy"]
        code = main(base_args(workspace, *args, *policy, "--record", str(recording), "--out", str(workspace / "p1")))
        assert code == 0
        calls = len(stub.chat_requests)
    recorded = read_items(workspace / "p1")
    assert len(recorded) == 1 and recorded[0]["policy_tokens"] > 0 and recorded[0]["turns"] >= 1
    assert calls > 0
    capsys.readouterr()
    # offline: no policy server, no executor model; everything comes from the recording
    assert main(base_args(workspace, *args, "--replay", str(recording), "--out", str(workspace / "p2"))) == 0
    assert comparable(read_items(workspace / "p2")) == comparable(recorded)


@pytest.mark.slow
def test_eval_against_a_running_server_with_a_token(
    workspace: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "test-token-for-eval"
    monkeypatch.setenv("EVAL_TEST_MCP_TOKEN", token)
    server_env = {"FLOWSTEER_MCP_TOKEN": token, "FLOWSTEER_LOG_LEVEL": "WARNING"}
    with HttpServerProcess("--config", str(workspace / "executor.toml"), env=server_env) as server:
        remote = ["--mcp-url", server.url, "--mcp-token-env", "EVAL_TEST_MCP_TOKEN"]
        args = ["--director", "template", "--sources", "gsm8k", "--concurrency", "2", "--out", str(workspace / "r")]
        assert main(base_args(workspace, *remote, *args)) == 0
    items = read_items(workspace / "r")
    assert [item["error"] for item in items] == [None, None]
    math_default = library_workflow("math", DEFAULT_WORKFLOW["math"]).dsl()
    assert all(item["answer"] and item["dsl"] == math_default for item in items)
    assert f"the MCP server at {server.url}" in capsys.readouterr().out


def test_mcp_token_env_must_be_set(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    remote = ["--mcp-url", "http://127.0.0.1:1/mcp", "--mcp-token-env", "EVAL_TEST_UNSET_TOKEN"]
    assert main(base_args(workspace, "--director", "template", *remote)) == 2
    assert "EVAL_TEST_UNSET_TOKEN (--mcp-token-env) is not set" in capsys.readouterr().err


def journal_lines(folder: Path) -> list[str]:
    return (folder / "items.jsonl").read_text(encoding="utf-8").splitlines()


def test_an_interrupted_eval_resumes_from_its_journal(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = workspace / "run"
    assert main(base_args(workspace, "--director", "direct", "--seed", "3", "--out", str(out))) == 0
    lines = journal_lines(out)
    assert json.loads(lines[0])["config"]["seed"] == 3 and len(lines) == 4  # header + one line per episode
    # a kill after the first episode, in the middle of writing the second
    (out / "items.jsonl").write_text(lines[0] + "\n" + lines[1] + "\n" + lines[2][:25], encoding="utf-8")
    kept = json.loads(lines[1])
    capsys.readouterr()

    resumed = ["--director", "direct", "--director", "template", "--seed", "3", "--out", str(out), "--resume"]
    assert main(base_args(workspace, *resumed)) == 0
    assert "plus 1 episodes graded before a resume" in capsys.readouterr().out
    document = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert document["resumed_items"] == 1 and len(document["items"]) == 6
    reused = [
        item for item in document["items"] if item["director"] == "direct" and item["problem_id"] == kept["problem_id"]
    ]
    assert reused == [kept]  # reused as recorded (same wall time), not run again
    assert len(journal_lines(out)) == 1 + 6  # the truncated line was dropped, every episode is on record


def test_journal_misuse_is_refused_without_touching_it(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = workspace / "run"
    assert main(base_args(workspace, "--director", "direct", "--sources", "nq", "--out", str(out))) == 0
    before = (out / "items.jsonl").read_bytes()
    capsys.readouterr()
    assert main(base_args(workspace, "--director", "direct", "--out", str(out))) == 2
    assert "already exists: pass --resume" in capsys.readouterr().err
    assert main(base_args(workspace, "--director", "direct", "--seed", "9", "--out", str(out), "--resume")) == 2
    assert "seed: journal None, this run 9" in capsys.readouterr().err
    assert main(base_args(workspace, "--director", "direct", "--out", str(workspace / "none"), "--resume")) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert main(base_args(workspace, "--director", "direct", "--resume")) == 2
    assert "--resume needs --out" in capsys.readouterr().err
    assert (out / "items.jsonl").read_bytes() == before
    header, item = before.decode().splitlines()
    (out / "items.jsonl").write_text(f"{header}\n{{broken\n{item}\n", encoding="utf-8")
    assert main(base_args(workspace, "--director", "direct", "--out", str(out), "--resume")) == 2
    assert "items.jsonl:2: not an item record" in capsys.readouterr().err


def test_a_dead_policy_server_gives_no_figures_and_resume_runs_those_episodes(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = workspace / "run"
    args = ["--director", "direct", "--director", "policy", "--sources", "gsm8k", "--out", str(out)]
    port = free_port()  # nothing listens there until the stub takes it
    policy = ["--policy-url", f"http://127.0.0.1:{port}/v1", "--policy-model", "stub-policy"]
    assert main(base_args(workspace, *args, *policy)) == 1
    printed = capsys.readouterr()
    assert printed.out == "" and not (out / "report.json").exists()
    assert "2 of 4 episodes did not run or could not be graded, so no figures are reported" in printed.err
    assert "2 x policy: APIConnectionError" in printed.err and "--resume" in printed.err
    direct_items = [item for item in read_items_journal(out) if item["director"] == "direct"]
    assert len(direct_items) == 2 and all(item["error"] is None for item in direct_items)

    with OpenAIStub(responder=policy_reply, served_models=["stub-policy"], port=port):  # the same server, back up
        assert main(base_args(workspace, *args, *policy, "--resume")) == 0
    document = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert document["resumed_items"] == 2  # the direct episodes; the failed policy ones ran again
    policy_items = [item for item in document["items"] if item["director"] == "policy"]
    assert len(policy_items) == 2 and all(item["policy_tokens"] > 0 and item["error"] is None for item in policy_items)


def read_items_journal(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in journal_lines(folder)[1:]]


def test_policy_reask_tokens_set_the_re_ask_budget(workspace: Path) -> None:
    from flowsteer_mcp.director.policy import REASK

    def no_action_first(body: dict[str, Any]) -> StubReply:
        messages = body["messages"]
        if REASK in messages[-1]["content"]:
            return StubReply(content="<action>finish</action>")
        if messages[0]["role"] != "system":
            return StubReply(content="Answer with the final number only.")
        return StubReply(content="Let me think about it.")

    args = ["--director", "policy", "--sources", "gsm8k", "--limit", "1", "--policy-reask-tokens", "41"]
    with OpenAIStub(responder=no_action_first, served_models=["stub-policy"]) as stub:
        policy = ["--policy-url", stub.base_url, "--policy-model", "stub-policy", "--out", str(workspace / "r")]
        assert main(base_args(workspace, *args, *policy)) == 0
        bodies = [r.body for r in stub.chat_requests]
    assert {b["max_tokens"] for b in bodies if REASK in b["messages"][-1]["content"]} == {41}


def test_policy_reask_tokens_need_the_policy_director(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(base_args(workspace, "--director", "direct", "--policy-reask-tokens", "41")) == 2
    assert "only used with --director policy" in capsys.readouterr().err
