"""`flowsteer eval --director policy` records which weights the server serves under --policy-model, and a resume
against other weights under the same name is refused (two policies in one table would be a silent lie)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.openai_stub import OpenAIStub
from tests.support.servers import free_port
from tests.training.test_cli import base_args
from tests.training.test_eval_policy_play import one_custom_then_finish, played  # noqa: F401 (fixture)
from training.cli import main

pytestmark = pytest.mark.usefixtures("no_cli_logging_setup")

BASE = "runs/sft-warmstart/merged"


def adapter(root: str) -> dict[str, dict[str, str]]:
    """`GET /models` as vLLM shows a LoRA module served as `trained`."""
    return {"trained": {"root": root, "parent": BASE}}


def evaluate(workspace: Path, out: Path, *, port: int, details: dict[str, dict[str, str]], resume: bool) -> int:
    with OpenAIStub(
        responder=one_custom_then_finish, served_models=["trained", BASE], model_details=details, port=port
    ):
        args = ["--director", "policy", "--sources", "gsm8k", "--limit", "1", "--out", str(out)]
        args += ["--policy-url", f"http://127.0.0.1:{port}/v1", "--policy-model", "trained"]
        return main(base_args(workspace, *args, *(["--resume"] if resume else [])))


def header(out: Path) -> dict[str, object]:
    config = json.loads((out / "items.jsonl").read_text(encoding="utf-8").splitlines()[0])["config"]
    assert isinstance(config, dict)
    return config


def test_the_journal_records_the_adapter_and_refuses_a_resume_against_another(
    played: Path,  # noqa: F811 (fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, port = played / "r", free_port()
    assert evaluate(played, out, port=port, details=adapter("/runs/cwrpo-run7/step-20/adapter"), resume=False) == 0
    assert header(out)["policy_weights"] == f"{BASE} + /runs/cwrpo-run7/step-20/adapter"
    before = (out / "items.jsonl").read_bytes()

    code = evaluate(played, out, port=port, details=adapter("/runs/cwrpo-run6/step-20/adapter"), resume=True)
    assert code == 2
    assert "policy_weights" in capsys.readouterr().err
    assert (out / "items.jsonl").read_bytes() == before

    assert evaluate(played, out, port=port, details=adapter("/runs/cwrpo-run7/step-20/adapter"), resume=True) == 0


def test_a_server_without_the_named_model_is_refused_before_any_episode(
    played: Path,  # noqa: F811 (fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = played / "r"
    with OpenAIStub(responder=one_custom_then_finish, served_models=["warmstart"]) as stub:
        args = ["--director", "policy", "--sources", "gsm8k", "--out", str(out)]
        args += ["--policy-url", stub.base_url, "--policy-model", "trained"]
        assert main(base_args(played, *args)) == 2
        assert not stub.chat_requests
    error = capsys.readouterr().err
    assert "serves warmstart, not 'trained'" in error and "--policy-model" in error
    assert not out.exists()


def test_a_journal_started_while_the_server_was_down_resumes_without_a_comparison(
    played: Path,  # noqa: F811 (fixture)
) -> None:
    out, port = played / "r", free_port()
    args = ["--director", "policy", "--sources", "gsm8k", "--limit", "1", "--out", str(out)]
    args += ["--policy-url", f"http://127.0.0.1:{port}/v1", "--policy-model", "trained"]
    assert main(base_args(played, *args)) == 1  # nothing listens: run failures, no figures
    assert header(out)["policy_weights"] is None
    assert evaluate(played, out, port=port, details=adapter("/a"), resume=True) == 0


def test_a_policy_joins_on_resume_a_run_that_had_none_and_is_then_held_to_it(
    played: Path,  # noqa: F811 (fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The policy settings describe only the policy's items: a journal with none of them takes a policy on resume
    (the baselines' items stay, as a workflow file added on resume does), and from then on the run is held to it."""
    out, port = played / "r", free_port()
    assert main(base_args(played, "--director", "direct", "--sources", "gsm8k", "--limit", "1", "--out", str(out))) == 0
    assert header(out)["policy_url"] is None

    weights = adapter("/runs/cwrpo-run7/step-20/adapter")
    assert evaluate(played, out, port=port, details=weights, resume=True) == 0
    assert header(out)["policy_weights"] == f"{BASE} + /runs/cwrpo-run7/step-20/adapter"
    directors = [json.loads(line)["director"] for line in (out / "items.jsonl").read_text().splitlines()[1:]]
    assert sorted(directors) == ["direct", "policy"]
    before = (out / "items.jsonl").read_bytes()

    code = evaluate(played, out, port=port, details=adapter("/runs/cwrpo-run6/step-20/adapter"), resume=True)
    assert code == 2
    assert "policy_weights" in capsys.readouterr().err
    assert (out / "items.jsonl").read_bytes() == before
