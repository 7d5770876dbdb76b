"""`flowsteer eval` over a fleet: episodes spread over several MCP servers (`--mcp-url` repeated, real HTTP
server processes with the scripted executor), the report complete with every URL recorded, and a resumed run
that uses other servers accepted (URLs choose where items run, not what they are)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.support.servers import HttpServerProcess
from tests.training.test_cli import base_args, hermetic_environment, read_items, workspace
from training.cli import main
from training.evaluate.clients import remote_clients

__all__ = ["hermetic_environment", "workspace"]  # fixtures


def test_eval_spreads_episodes_over_two_mcp_servers(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {"FLOWSTEER_LOG_LEVEL": "WARNING"}
    config = str(workspace / "executor.toml")
    with HttpServerProcess("--config", config, env=env) as one, HttpServerProcess("--config", config, env=env) as two:
        fleet = ["--mcp-url", one.url, "--mcp-url", two.url]
        args = ["--director", "template", "--concurrency", "2", "--out", str(workspace / "r")]
        assert main(base_args(workspace, *fleet, *args)) == 0
        items = read_items(workspace / "r")
        assert len(items) == 3 and [item["error"] for item in items] == [None, None, None]
        assert all(item["answer"] for item in items)
        report = json.loads((workspace / "r" / "report.json").read_text(encoding="utf-8"))
        assert report["config"]["mcp_urls"] == [one.url, two.url] and report["config"]["mcp_url"] == one.url
        assert f"the MCP servers at {one.url}, {two.url}" in capsys.readouterr().out

        # the episodes' sessions: the least busy server first, each session staying on its server
        clients = remote_clients([one.url, two.url])

        async def two_sessions() -> list[int]:
            async with clients() as first, clients() as second:
                opened = [server.in_flight for server in clients.pool.replicas]
                for client in (first, second):
                    assert (await client.list_tools()).tools
            return opened

        assert anyio.run(two_sessions) == [1, 1]

        # resuming with the servers in another order (other addresses) is accepted: every item is reused
        (workspace / "r" / "report.json").unlink()
        swapped = ["--mcp-url", two.url, "--mcp-url", one.url]
        assert main(base_args(workspace, *swapped, *args, "--resume")) == 0
    resumed = json.loads((workspace / "r" / "report.json").read_text(encoding="utf-8"))
    assert resumed["resumed_items"] == 3 and resumed["config"]["mcp_urls"] == [two.url, one.url]


def test_repeated_or_bad_fleet_urls_are_refused(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = "http://127.0.0.1:1/mcp"
    assert main(base_args(workspace, "--director", "template", "--mcp-url", url, "--mcp-url", url + "/")) == 2
    assert f"--mcp-url {url} given more than once" in capsys.readouterr().err
    assert main(base_args(workspace, "--director", "template", "--mcp-url", url, "--mcp-url", "ftp://x")) == 2
    assert "--mcp-url must be an http(s) URL" in capsys.readouterr().err
