"""`flowsteer eval` on fixed workflows: `--workflow FILE` (an export_workflow JSON) and `--director
template:NAME`, end to end through the in-process MCP server on a scripted executor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.director.link import CanvasLink
from flowsteer_mcp.server import build_server
from tests.support.scripted_runner import ScriptedRunner
from training.cli import main
from training.evaluate.directors import build_director, build_workflow_director

SCRIPTED_CONFIG = """
[executor]
model = "script"

[models.script]
backend = "scripted"
default_reply = "Final answer: 16"
"""

PROBLEMS = [
    {"id": "toy/1", "source": "gsm8k", "problem_type": "math", "problem": "What is 8 + 8?", "ground_truth": "16"},
    {"id": "toy/2", "source": "gsm8k", "problem_type": "math", "problem": "What is 9 + 7?", "ground_truth": "16"},
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


def eval_args(workspace: Path, *extra: str) -> list[str]:
    data, config = str(workspace / "data.jsonl"), str(workspace / "executor.toml")
    return ["eval", "--data", data, "--config", config, "--no-progress", "--concurrency", "1", *extra]


def exported_workflow(path: Path) -> str:
    """Build `Custom{3} -> ScEnsemble` with the typed tools on a server, export it as JSON into `path`."""

    async def build() -> str:
        server = build_server(runner=ScriptedRunner())
        async with Client(server.mcp) as client:
            link = CanvasLink(client)
            created = await link.create(TaskSpec(problem="any", task_type="math"), {"execute_each_step": False})
            workflow_id = created["workflow_id"]
            await link.call("add_operator", workflow_id=workflow_id, operator="Custom", prompt="Add up.", samples=3)
            await link.call("add_operator", workflow_id=workflow_id, operator="ScEnsemble", prompt="Vote.")
            exported = await link.call("export_workflow", workflow_id=workflow_id, format="json")
        return str(exported["content"])

    content = anyio.run(build)
    path.write_text(content, encoding="utf-8")
    return content


def report(folder: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    return document


def test_an_exported_workflow_file_and_a_library_workflow_are_evaluated_side_by_side(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = exported_workflow(workspace / "vote3.json")
    out = workspace / "run"
    args = ["--director", "template:greedy-cot", "--workflow", str(workspace / "vote3.json"), "--out", str(out)]
    assert main(eval_args(workspace, *args)) == 0
    printed = capsys.readouterr().out
    assert "| template:greedy-cot |" in printed and "| workflow:vote3 |" in printed
    assert "workflow:vote3 vs template:greedy-cot, paired on the same 2 problems" in printed
    document = report(out)
    assert document["config"]["directors"] == ["template:greedy-cot", "workflow:vote3"]
    assert document["config"]["workflows"] == [str(workspace / "vote3.json")]
    by_director: dict[str, list[dict[str, Any]]] = {}
    for item in document["items"]:
        by_director.setdefault(item["director"], []).append(item)
    assert {item["dsl"] for item in by_director["workflow:vote3"]} == {json.loads(spec)["dsl"]}
    assert {item["dsl"] for item in by_director["template:greedy-cot"]} == {"Custom"}
    assert all(item["error"] is None and item["score"] == 1.0 for item in document["items"])
    # 3 draws and a vote cost more executor calls than one greedy chain of thought
    assert all(item["llm_calls"] == 1 for item in by_director["template:greedy-cot"])
    assert all(item["llm_calls"] > 1 for item in by_director["workflow:vote3"])


def test_list_workflows_prints_the_library_without_other_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--list-workflows"]) == 0
    text = capsys.readouterr().out
    assert "sample4-exec" in text and "Programmer{4} -> ScEnsemble" in text and "pot2+cot2-vote" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--director", "template:nope"],
            "unknown workflow 'nope'; the library has: classic, greedy, direct1, sample4-exec",
        ),
        ([], "give at least one --director or --workflow"),
        (["--workflow", "a/w.json", "--workflow", "b/w.json"], "--workflow files named w given more than once"),
    ],
)
def test_bad_workflow_arguments_exit_2_with_a_message(
    workspace: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(eval_args(workspace, *extra)) == 2
    assert message in capsys.readouterr().err


def test_an_unusable_workflow_file_exits_2_before_running(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(eval_args(workspace, "--workflow", str(workspace / "missing.json"))) == 2
    assert "missing.json" in capsys.readouterr().err
    (workspace / "bad.json").write_text('{"dsl": "Custom"}', encoding="utf-8")
    assert main(eval_args(workspace, "--workflow", str(workspace / "bad.json"))) == 2
    assert "bad.json is not a workflow JSON export (at graph: Field required)" in capsys.readouterr().err


def test_directors_are_named_after_the_library_entry_or_the_file_stem(tmp_path: Path) -> None:
    exported_workflow(tmp_path / "my-flow.json")
    assert build_director("template:pot").name == "template:pot"
    assert build_director("template").name == "template"
    assert build_workflow_director(tmp_path / "my-flow.json").name == "workflow:my-flow"


def test_resume_refuses_a_workflow_file_that_changed(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = workspace / "vote3.json"
    spec = exported_workflow(spec_path)
    out = workspace / "run"
    args = ["--workflow", str(spec_path), "--out", str(out)]
    assert main(eval_args(workspace, *args)) == 0
    assert main(eval_args(workspace, *args, "--resume")) == 0  # same file: the journal is reused
    assert "Add up." in spec
    spec_path.write_text(spec.replace("Add up.", "Add up carefully."), encoding="utf-8")
    capsys.readouterr()
    assert main(eval_args(workspace, *args, "--resume")) == 2
    assert "workflow_digests" in capsys.readouterr().err


def test_a_workflow_file_added_on_resume_runs_and_the_journal_keeps_every_digest(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = workspace / "vote3.json", workspace / "other.json"
    first_spec = exported_workflow(first)
    second.write_text(first_spec.replace("Add up.", "Sum it."), encoding="utf-8")
    out = workspace / "run"
    assert main(eval_args(workspace, "--workflow", str(first), "--out", str(out))) == 0
    both = ["--workflow", str(first), "--workflow", str(second), "--out", str(out), "--resume"]
    assert main(eval_args(workspace, *both)) == 0  # a workflow added on resume, like a director
    lines = (out / "items.jsonl").read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    assert set(header["config"]["workflow_digests"]) == {"workflow:vote3", "workflow:other"}
    assert {json.loads(line)["director"] for line in lines[1:]} == {"workflow:vote3", "workflow:other"}
    # A resumed run that leaves a file out keeps its digest, so the file cannot come back changed later.
    assert main(eval_args(workspace, "--workflow", str(second), "--out", str(out), "--resume")) == 0
    header = json.loads((out / "items.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert set(header["config"]["workflow_digests"]) == {"workflow:vote3", "workflow:other"}
    first.write_text(first_spec.replace("Add up.", "Add up carefully."), encoding="utf-8")
    capsys.readouterr()
    assert main(eval_args(workspace, *both)) == 2
    assert "workflow:vote3 is not the file the journal's run used" in capsys.readouterr().err


def test_resume_refuses_other_engine_settings_and_the_journal_records_them(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = workspace / "run"
    assert main(eval_args(workspace, "--director", "direct", "--out", str(out))) == 0
    header = json.loads((out / "items.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert header["config"]["engine"]["reasks"] == 2 and header["config"]["engine"]["sampled_reasks"] is None
    config = workspace / "executor.toml"
    config.write_text(SCRIPTED_CONFIG + "\n[engine]\nsampled_reasks = 0\n", encoding="utf-8")
    capsys.readouterr()
    resumed = main(eval_args(workspace, "--director", "direct", "--out", str(out), "--resume"))
    assert resumed == 2  # the re-ask budget changes results: the two runs must not share a table
    assert "engine:" in capsys.readouterr().err


def test_a_journal_from_before_engine_settings_were_recorded_still_resumes(workspace: Path) -> None:
    out = workspace / "run"
    assert main(eval_args(workspace, "--director", "direct", "--out", str(out))) == 0
    journal = out / "items.jsonl"
    lines = journal.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    del header["config"]["engine"]
    journal.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    assert main(eval_args(workspace, "--director", "direct", "--out", str(out), "--resume")) == 0
