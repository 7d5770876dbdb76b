"""Hostile load: a seeded fuzz of every MCP tool, then a kill -9 loop against a real server with a SQLite store.

    python benchmarks/hostile_load.py [--seed N] [--calls N] [--kills N] [--quick]

Fuzz: random and hostile input (long strings, huge numbers, lone surrogates, nested tags, random JSON for
import, unknown ids, bursts of concurrent creates beyond max_workflows) through the in-memory MCP client, half
of the calls against a memory store and half against a SQLite store. Each call on a known workflow is bracketed
by get_workflow, and the outcome is checked:
  - crash: the client raised something other than a clean MCP error, an internal error (-32603) came back, or
    the server logged an error or a traceback;
  - partial edit: a call that failed changed the workflow; a step that succeeded did not use exactly one round
    and one history entry, or reported a state other than the one stored; an add that succeeded added no node;
    the SQLite file disagrees with the live workflow;
  - limit breach: more workflows than max_workflows after a burst of concurrent creates;
  - leak: lock entries left on the idle server after the fuzz;
  - accepted: a call past a published bound (an over-long string or list, an unknown argument key, an unpaired
    surrogate, an unknown operator in the options, a nonsensical number) that did not fail, or changed anything;
  - long error: an error message (or an ok=false step's message) over 1,000 characters.
Footprint: creates workflows with the largest payload every bound allows (task, public tests, entry point and
options at their limits; in ASCII, in 4-byte characters, the worst in memory, and in control characters, the worst
in SQLite's JSON) and measures the server memory each one retains (tracemalloc, over N workflows) and its SQLite
row; over 256 KB per workflow is a finding.
Kill loop: starts `flowsteer-mcp --transport http --store sqlite:...`, makes acknowledged edits on several
workflows concurrently, SIGKILLs the server at a random moment (inside requests), restarts it and counts the
acknowledged edits it lost; a graceful stop and restart at the end must lose nothing either.

Prints the figures (a summary line, the longest error, the footprint) only when nothing was found; otherwise
prints the findings and exits 1 (2 when the harness itself could not run).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import logging
import os
import random
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import structlog
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import INTERNAL_ERROR, CallToolResult, TextContent

from flowsteer_mcp.canvas.dsl import render
from flowsteer_mcp.canvas.execution import ExecutionReport, ProgressCallback, ProgressEvent
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.options import CanvasLimits, TaskSpec
from flowsteer_mcp.canvas.session import Canvas
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.app import FlowSteerServer
from flowsteer_mcp.server.arguments import (
    MAX_IMPORT_CHARS,
    MAX_NAME_CHARS,
    MAX_NAMES,
    MAX_PRESET_CHARS,
    MAX_PROMPT_ARGUMENT_CHARS,
    MAX_STAGE_OPERATORS,
    MAX_TASK_CHARS,
    MAX_URI_CHARS,
)
from flowsteer_mcp.store.memory import MemoryStore
from flowsteer_mcp.store.sqlite import SQLiteStore
from operators.registry import default_registry

REPO_ROOT = Path(__file__).resolve().parents[1]
MAX_WORKFLOWS = 12
SHOWN_PER_KIND = 8
PREVIEW_CHARS = 160
HARNESS_FAILED_EXIT = 2
READY_TIMEOUT_S = 60.0
STALL_TIMEOUT_S = 120.0  # the kill loop gives up when the server acknowledges nothing for this long
STEP_TOOLS = {"act", "add_operator", "add_structure", "delete_node", "modify_node", "set_prompt", "finish"}
ADDING_TOOLS = {"add_operator", "add_structure"}
READ_TOOLS = {"get_workflow", "export_workflow"}
NO_WORKFLOW_TOOLS = {"list_workflows", "list_operators", "list_library", "get_job", "cancel_job", "list_jobs"}
JOB_TOOLS = ("act", "add_operator", "add_structure", "set_prompt", "run_workflow", "finish", "solve", "get_workflow")
LIBRARY_NAMES = ("default", "direct8-exec", "direct-sc8", "pot4-vote", "classic", "greedy")
SAFE_OPERATORS = ["Plan", "Custom", "Programmer", "Review", "Verify", "Revise", "Format", "AnswerGenerate"]
LIMITS = CanvasLimits()  # the server's defaults, which the input schemas publish
MAX_ERROR_CHARS = 1_000  # errors quote input only as short excerpts, so none is longer than this
FOOTPRINT_BOUND = 256 * 1024  # bytes of server memory, and of SQLite row, per workflow after the worst-case create

# ----- findings ---------------------------------------------------------------------------------------------


@dataclass
class Findings:
    calls: int = 0
    crashes: list[str] = field(default_factory=list)
    partial_edits: list[str] = field(default_factory=list)
    limit_breaches: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)
    long_errors: list[str] = field(default_factory=list)
    footprint: list[str] = field(default_factory=list)
    slowest: tuple[float, str] = (0.0, "")
    longest_error: tuple[int, str] = (0, "")
    refused: int = 0  # calls that had to be refused (and were)
    per_tool: Counter[str] = field(default_factory=Counter)

    def timed(self, tool: str, seconds: float) -> None:
        self.per_tool[tool] += 1
        if seconds > self.slowest[0]:
            self.slowest = (seconds, tool)

    def error_message(self, what: str, text: str) -> None:
        """Every error text the fuzz sees: the longest is reported, one over MAX_ERROR_CHARS is a finding."""
        if len(text) > self.longest_error[0]:
            self.longest_error = (len(text), what.split("(", 1)[0])
        if len(text) > MAX_ERROR_CHARS:
            self.long_errors.append(f"{what}: {len(text)} characters: {preview(text)}")

    @property
    def clean(self) -> bool:
        return not (
            self.crashes
            or self.partial_edits
            or self.limit_breaches
            or self.leaks
            or self.accepted
            or self.long_errors
            or self.footprint
        )


@dataclass
class KillLedger:
    """Acknowledged edits: (round, dsl) per workflow since the last restart, and what each restart lost."""

    pending: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)
    acknowledged: int = 0
    lost_count: int = 0
    lost: list[str] = field(default_factory=list)
    kills: int = 0

    _target: int = 0
    _reached: anyio.Event | None = None

    def ack(self, workflow_id: str, round_: int, dsl: str) -> None:
        self.pending.setdefault(workflow_id, []).append((round_, dsl))
        self.known.add(workflow_id)
        self.acknowledged += 1
        if self._reached is not None and self.acknowledged >= self._target:
            self._reached.set()

    async def wait_for(self, more: int) -> None:
        """Return once `more` further edits have been acknowledged."""
        self._target, self._reached = self.acknowledged + more, anyio.Event()
        await self._reached.wait()

    def lose(self, count: int, what: str) -> None:
        self.lost_count += count
        self.lost.append(what)

    @property
    def kept(self) -> int:
        return self.acknowledged - self.lost_count


def preview(value: object) -> str:
    text = repr(value)  # escapes surrogates and control characters
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + f"... ({len(text)} chars)"


def result_text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


# ----- server-side errors -----------------------------------------------------------------------------------


class ServerErrors(logging.Handler):
    """Collects what the in-process server logs at ERROR or with a traceback (stdlib logging and structlog)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        kind = f" ({record.exc_info[0].__name__})" if record.exc_info and record.exc_info[0] else ""
        self.seen.append(f"{record.name}: {record.getMessage()[:200]}{kind}")

    def structlog_processor(self, _: Any, method: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
        if method in ("error", "critical", "exception") or event.get("exc_info"):
            details = {k: v for k, v in event.items() if k not in ("event", "exc_info")}
            self.seen.append(f"{event.get('event')} {preview(details)}")
        raise structlog.DropEvent

    def take(self) -> list[str]:
        seen, self.seen = self.seen, []
        return seen

    def install(self) -> None:
        root = logging.getLogger()
        root.handlers = [self]
        root.setLevel(logging.WARNING)
        structlog.configure(
            processors=[self.structlog_processor],
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
            cache_logger_on_first_use=False,
        )


class EchoRunner:
    """A fast runner double: the answer is the DSL, with one progress event per operator node."""

    async def run(
        self, graph: WorkflowGraph, task: TaskSpec, *, progress: ProgressCallback | None = None
    ) -> ExecutionReport:
        nodes = list(graph.iter_operator_nodes())
        if progress is not None:
            for done, node in enumerate(nodes, start=1):
                await progress(
                    ProgressEvent(
                        node_id=node.id, operator=node.operator, phase="finished", completed=done, total=len(nodes)
                    )
                )
        return ExecutionReport(status="ok", output=render(graph) or "empty")


# ----- hostile values ---------------------------------------------------------------------------------------


class Hostile:
    """Seeded generators of tool arguments: mostly plausible (so workflows grow and reach every state), with a
    `hostility` share of hostile values (long, huge, surrogates, nested tags, wrong types)."""

    def __init__(self, rng: random.Random, operators: list[str], quick: bool, hostility: float = 0.3) -> None:
        self.rng = rng
        self.operators = operators
        self.long = 40_000 if quick else 120_000
        self.hostility = hostility

    def pick(self, *options: Any) -> Any:
        return self.rng.choice(options)

    def hostile(self) -> bool:
        return self.rng.random() < self.hostility

    def number(self) -> Any:
        if not self.hostile():
            return self.rng.randrange(0, 4)
        return self.pick(-1, 7, 10, 11, 10**3, 10**18, 2**63, -(10**30), 10**400, 1.5, "3", None)

    def text(self) -> str:
        if not self.hostile():
            return self.pick(
                "Solve it step by step.",
                "Check the result carefully.",
                "Write solve() and return the value.",
                "What is 17 * 23?",
                "Output only the number.",
            )
        rng = self.rng
        return str(
            self.pick(
                lambda: "",
                lambda: self.pick(" ", "\t\n ", "\u200b", "\x00"),
                lambda: "a " * rng.randrange(1, self.long // 2),
                lambda: self.pick("\ud800", "ok \udfff tail", "\udbff\udc00", "x" + "\ud800" * 3),
                lambda: "<action>" * rng.randrange(1, 4000),
                lambda: "9" * rng.randrange(4000, 6000),
                lambda: self.pick("<think>", "<think>plan</think>", "[action]add[/action]", "<ACTION>ADD</ACTION>"),
                lambda: "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(1, 300))),
                lambda: "\u202eevil\u202c \U0001f600 e\u0301 " * rng.randrange(1, 50),
                lambda: "{" * rng.randrange(1, 3000),
                lambda: "x" * rng.randrange(3900, 4200),
            )()
        )

    def operator(self) -> Any:
        if not self.hostile():
            return self.pick(*self.operators)
        return self.pick("plan", "Wizard", "", "X" * 31_000, "Plan\x00", "Pl\ud800an", 42, None, ["Plan"])

    def node_id(self, nodes: list[str]) -> Any:
        if not self.hostile():
            return self.pick(*nodes) if nodes else "node_1"
        return self.pick("", "node_" + "9" * 5000, "node_-1", "node_0", "NODE_1", "\ud800", 7, "node_1 ", "node_99")

    def operators_list(self) -> Any:
        if not self.hostile():
            return [self.pick(*SAFE_OPERATORS) for _ in range(self.rng.randrange(2, 4))]
        return self.pick(
            "Plan, Custom", None, [], [["Plan"]], {"a": 1}, [self.operator() for _ in range(self.rng.randrange(0, 9))]
        )

    def structure(self) -> dict[str, Any]:
        """add_structure arguments: a coherent structure, sometimes with one argument made hostile."""
        kind = self.pick("parallel", "loop", "conditional")
        args: dict[str, Any] = {"structure": kind}
        if kind == "conditional":
            args |= {"condition": self.pick("Verify", "Test", "Review"), "on_fail": self.pick("Revise", "Custom")}
            if self.rng.random() < 0.5:
                args["on_pass"] = self.pick("done", "Format")
        else:
            args["operators"] = [self.pick(*SAFE_OPERATORS) for _ in range(self.rng.randrange(2, 4))]
            if kind == "loop":
                args["count"] = self.rng.randrange(1, 4)
        if self.rng.random() < 0.5:
            args["prompts"] = [self.pick(None, "Check it well.") for _ in range(self.rng.randrange(1, 4))]
        if self.hostile():
            key = self.pick("structure", "operators", "condition", "on_fail", "on_pass", "count", "prompts", "position")
            args[key] = self.pick(
                self.number(), self.text(), self.operator(), self.operators_list(), [self.text(), None], "tree"
            )
        return args

    def options(self) -> Any:
        if not self.hostile():
            return self.pick(None, None, {"max_rounds": 60, "finish": "relaxed"}, {"max_rounds": 30})
        options: dict[str, Any] = {}
        for key, value in (
            ("max_rounds", self.pick(5, 20, 60, 200, 201, 0, -3, 10**30, "x")),
            ("finish", self.pick("paper", "relaxed", "nope", {"min_operators": self.number()}, {"bogus": 1})),
            ("execute_each_step", self.pick(True, False, "yes")),
            ("hints", self.pick(True, False)),
            ("lenient", self.pick(True, False)),
            ("prompt_turns", self.pick(True, False)),
            ("disabled_operators", self.pick([], ["Plan"], ["Wizard"], ["Custom", "Format"])),
        ):
            if self.rng.random() < 0.4:
                options[key] = value
        if self.rng.random() < 0.05:
            options["surprise"] = True
        return options

    def act_text(self, nodes: list[str]) -> str:
        rng = self.rng
        choice = rng.randrange(10)
        op = self.pick(*SAFE_OPERATORS)
        prompt = "" if rng.random() < 0.4 else f"<prompt>{self.text()}</prompt>"
        if choice <= 2:
            return f"<action>add</action><operator>{self.operator() if rng.random() < 0.2 else op}</operator>{prompt}"
        if choice == 3:
            ops = ", ".join(self.pick(*SAFE_OPERATORS) for _ in range(rng.randrange(1, 8)))
            kind = self.pick("parallel", "loop")
            count = f"<count>{self.number()}</count>" if kind == "loop" else ""
            return f"<action>add</action><structure>{kind}</structure><operators>{ops}</operators>{count}{prompt}"
        if choice == 4:
            return (
                "<action>add</action><structure>conditional</structure><condition>"
                f"{self.pick('Verify', 'Test', 'Review', 'Plan')}</condition><true>{op}</true>"
                f"<false>{self.pick('done', 'Format', '')}</false>"
            )
        if choice == 5:
            action = self.pick("delete", "modify", "set_prompt")
            extra = f"<operator>{op}</operator>" if action == "modify" else ""
            return f"<action>{action}</action><target>{self.node_id(nodes)}</target>{extra}{prompt}"
        if choice == 6:
            return self.pick(
                "<action>finish</action>",
                f"<action>finish</action><answer>{self.text()}</answer>",
                "<action>cancel</action>",
            )
        return self.text()

    def dsl(self) -> str:
        rng = self.rng
        parts: list[str] = []
        for _ in range(rng.randrange(1, 8)):
            op = str(self.operator()) if rng.random() < 0.2 else self.pick(*SAFE_OPERATORS)
            shape = rng.randrange(6)
            if shape == 0:
                parts.append(f"[{op}, {self.pick(*SAFE_OPERATORS)}]")
            elif shape == 1:
                parts.append(f"({op} -> {self.pick(*SAFE_OPERATORS)}) * {self.number()}")
            elif shape == 2:
                parts.append(f"Verify ? {op} : {self.pick('done', 'Format')}")
            elif shape == 3:
                parts.append("(" * rng.randrange(1, 3000) + op + ")" * rng.randrange(0, 3000))
            else:
                parts.append(str(op))
        return " -> ".join(parts)

    def random_json(self, depth: int = 0) -> Any:
        rng = self.rng
        if depth > 5 or rng.random() < 0.3:
            return self.pick(self.number(), self.text()[:200], True, None, self.operator())
        if rng.random() < 0.5:
            return [self.random_json(depth + 1) for _ in range(rng.randrange(0, 5))]
        keys = ["format", "dsl", "graph", "stages", "kind", "id", "operator", "prompt", "next_index", "operators"]
        keys += ["branches", "body", "count", "check", "on_fail", "on_pass", self.text()[:40]]
        return {self.pick(*keys): self.random_json(depth + 1) for _ in range(rng.randrange(0, 5))}

    def mutated(self, document: Any) -> Any:
        """A copy of a valid export with one value anywhere in it replaced by a hostile one."""
        document = json.loads(json.dumps(document))
        holders: list[tuple[Any, Any]] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    holders.append((node, key))
                    walk(value)
            elif isinstance(node, list):
                for index, value in enumerate(node):
                    holders.append((node, index))
                    walk(value)

        walk(document)
        if holders:
            holder, key = self.rng.choice(holders)
            holder[key] = self.pick(self.number(), self.text()[:5000], None, [], {}, "node_" + "9" * 4400, 10**4300)
        return document

    def spec(self, exports: list[Any]) -> str:
        rng = self.rng
        choice = rng.randrange(10)
        if choice <= 2:
            return self.dsl()
        if choice <= 5 and exports:
            document = self.mutated(rng.choice(exports))
            try:
                return json.dumps(document)
            except ValueError:  # an int past Python's str() digit limit cannot even be sent
                return json.dumps(self.random_json())
        if choice == 6:
            return json.dumps(self.random_json())
        if choice == 7:
            depth = rng.randrange(100, 20_000)
            return '{"format": "flowsteer.workflow/v1", "graph": {"stages": ' + "[" * depth + "]" * depth + "}}"
        if choice == 8:
            return '{"format": "flowsteer.workflow/v1", "graph": {"stages": [], "next_index": ' + "9" * 4300 + "}}"
        return self.text()


# ----- calls past a bound --------------------------------------------------------------------------------------

SURROGATES = ("\ud800", "\udfff", "\udbff")
TASK = "What is 17 * 23?"
REFUSED_BECAUSE = {  # what the error of each kind of refused call must say
    "too long": ("characters; the limit is", "items; the limit is"),
    "unknown key": ("unknown argument", "is not a known field"),
    "surrogate": ("unpaired surrogate",),
    "options": ("options", "operators", "max_rounds", "finish", "limit"),
}


class Refused:
    """Seeded tool calls past a published bound or check, each with why it must be refused: a string or list
    just or far over its limit, an unknown argument key (top level or nested), an unpaired surrogate in any
    string, options with unknown operators or numbers no workflow could meet. `wid` is a live workflow, so an
    edit accepted by mistake would show."""

    def __init__(self, rng: random.Random, operators: list[str]) -> None:
        self.rng = rng
        self.operators = operators

    def call(self, wid: str) -> tuple[str, str, dict[str, Any]]:
        """(why, tool, arguments)."""
        why = self.rng.choice(list(REFUSED_BECAUSE))
        make = {
            "too long": self.too_long,
            "unknown key": self.unknown_key,
            "surrogate": self.surrogate,
            "options": self.options,
        }[why]
        tool, arguments = make(wid)
        return why, tool, arguments

    def over(self, limit: int) -> int:
        return limit + self.rng.choice((1, self.rng.randrange(2, 5000)))

    def text(self, limit: int) -> str:
        return self.rng.choice(("x", "\U0001f600", "é", "<")) * self.over(limit)

    def too_long(self, wid: str) -> tuple[str, dict[str, Any]]:
        name = "N" * self.over(MAX_NAME_CHARS)
        return self.rng.choice(
            [
                ("create_workflow", {"task": self.text(MAX_TASK_CHARS)}),
                ("create_workflow", {"task": TASK, "entry_point": "x" * self.over(LIMITS.max_entry_point_chars)}),
                ("create_workflow", {"task": TASK, "public_tests": self.text(LIMITS.max_public_tests_chars)}),
                ("import_workflow", {"spec": "Plan" + " " * (MAX_IMPORT_CHARS - 3), "task": TASK}),
                ("import_workflow", {"spec": "Plan", "task": self.text(MAX_TASK_CHARS)}),
                ("act", {"workflow_id": wid, "text": self.text(LIMITS.max_act_chars)}),
                (
                    "add_operator",
                    {"workflow_id": wid, "operator": "Plan", "prompt": self.text(LIMITS.max_prompt_chars)},
                ),
                ("add_operator", {"workflow_id": wid, "operator": name}),
                ("modify_node", {"workflow_id": wid, "node_id": "node_1", "operator": name}),
                ("set_prompt", {"workflow_id": wid, "node_id": "node_1", "prompt": self.text(LIMITS.max_prompt_chars)}),
                ("set_prompt", {"workflow_id": wid, "node_id": name, "prompt": "Solve it step by step."}),
                ("finish", {"workflow_id": wid, "answer": self.text(LIMITS.max_answer_chars)}),
                ("get_workflow", {"workflow_id": "w" * self.over(64)}),
                (
                    "add_structure",
                    {
                        "workflow_id": wid,
                        "structure": "parallel",
                        "operators": ["Custom"] * self.over(MAX_STAGE_OPERATORS),
                    },
                ),
                (
                    "add_structure",
                    {
                        "workflow_id": wid,
                        "structure": "loop",
                        "operators": ["Custom", "Review"],
                        "count": 2,
                        "prompts": ["Check it well."] * self.over(MAX_STAGE_OPERATORS),
                    },
                ),
                (
                    "add_structure",
                    {"workflow_id": wid, "structure": "conditional", "condition": name, "on_fail": "Revise"},
                ),
            ]
        )

    def unknown_key(self, wid: str) -> tuple[str, dict[str, Any]]:
        key = self.rng.choice(("bogus", "k" * self.rng.randrange(41, 5000), "ctx", "Workflow_Id", "task ", "postion"))
        nested = self.rng.choice(({key: 1}, {"finish": {"preset": "mine", key: 1}}))
        return self.rng.choice(
            [
                ("create_workflow", {"task": TASK, key: 1}),
                ("create_workflow", {"task": TASK, "options": nested}),
                ("import_workflow", {"spec": "Plan", "task": TASK, "options": nested}),
                ("act", {"workflow_id": wid, "text": "<action>add</action><operator>Plan</operator>", key: True}),
                ("add_operator", {"workflow_id": wid, "operator": "Plan", key: 0}),
                ("get_workflow", {"workflow_id": wid, key: "x"}),
                ("list_operators", {key: 1}),
                ("list_workflows", {key: None}),
            ]
        )

    def surrogate(self, wid: str) -> tuple[str, dict[str, Any]]:
        bad = self.rng.choice(SURROGATES)

        def spoiled(text: str) -> str:
            cut = self.rng.randrange(len(text) + 1)
            return text[:cut] + bad + text[cut:]

        return self.rng.choice(
            [
                ("create_workflow", {"task": spoiled(TASK)}),
                ("create_workflow", {"task": TASK, "entry_point": spoiled("solve")}),
                ("create_workflow", {"task": TASK, "public_tests": spoiled("assert solve() == 391")}),
                ("create_workflow", {"task": TASK, "options": {"finish": {"preset": spoiled("mine")}}}),
                ("create_workflow", {"task": TASK, "options": {"finish": {"solver_operators": [spoiled("Plan")]}}}),
                ("create_workflow", {"task": TASK, "options": {"disabled_operators": ["Review", spoiled("Plan")]}}),
                ("import_workflow", {"spec": spoiled("Plan -> Custom"), "task": TASK}),
                ("act", {"workflow_id": wid, "text": spoiled("<action>add</action><operator>Plan</operator>")}),
                ("add_operator", {"workflow_id": wid, "operator": "Plan", "prompt": spoiled("Plan the steps.")}),
                ("add_operator", {"workflow_id": wid, "operator": spoiled("Plan")}),
                (
                    "add_structure",
                    {
                        "workflow_id": wid,
                        "structure": "parallel",
                        "operators": ["Custom", "Plan"],
                        "prompts": [spoiled("x")],
                    },
                ),
                ("set_prompt", {"workflow_id": wid, "node_id": "node_1", "prompt": spoiled("Check it well.")}),
                ("finish", {"workflow_id": wid, "answer": spoiled("391")}),
                ("get_workflow", {"workflow_id": spoiled(wid)}),
            ]
        )

    def options(self, wid: str) -> tuple[str, dict[str, Any]]:
        names = self.operators
        options = self.rng.choice(
            [
                {"finish": {"preset": "p" * self.over(MAX_PRESET_CHARS)}},
                {"finish": {"preset": ""}},
                {"finish": {"solver_operators": [self.rng.choice(names)] * self.over(MAX_NAMES)}},
                {"finish": {"checker_operators": ["Verify", self.rng.choice(("Wizard", "Verify2", "x" * 64))]}},
                {"finish": {"solver_operators": ["S" * self.over(MAX_NAME_CHARS)]}},
                {"finish": {"verbose_output_chars": self.rng.choice((0, -5, -(10**30)))}},
                {"finish": {"verbose_output_chars": LIMITS.max_answer_chars + 1}},
                {"finish": {"min_operators": self.rng.choice((-1, LIMITS.max_operators + 1, 10**18))}},
                {"finish": {"require_solver": True, "solver_operators": []}},
                {"finish": {"require_checker": True, "checker_operators": []}},
                {"disabled_operators": [self.rng.choice(names)] * self.over(MAX_NAMES)},
                {"disabled_operators": ["Review", f"Dance{self.rng.randrange(100)}"]},
                {"disabled_operators": ["D" * self.over(MAX_NAME_CHARS)]},
                {"max_rounds": self.rng.choice((0, -1, 201, 10**7))},
            ]
        )
        if self.rng.random() < 0.5:
            return "create_workflow", {"task": TASK, "options": options}
        return "import_workflow", {"spec": "Plan -> Custom", "task": TASK, "options": options}


# ----- the fuzz ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    ok: bool
    content: dict[str, Any] | None
    message: str


def durable(detail: dict[str, Any]) -> dict[str, Any]:
    return {
        key: detail.get(key)
        for key in ("graph", "state", "history_length", "last_feedback", "end", "task", "options", "last_execution")
    }


def node_count(detail: dict[str, Any]) -> int:
    return sum(1 for node in detail["state"]["nodes"] if node.get("kind") == "operator")


class Fuzzer:
    def __init__(
        self,
        client: Client,
        app: FlowSteerServer,
        errors: ServerErrors,
        findings: Findings,
        rng: random.Random,
        hostile: Hostile,
        label: str,
        database: Path | None,
    ) -> None:
        self.client = client
        self.app = app
        self.errors = errors
        self.findings = findings
        self.rng = rng
        self.hostile = hostile
        self.label = label
        self.database = database
        self.ids: list[str] = []
        self.done: set[str] = set()
        self.nodes: dict[str, list[str]] = {}  # node ids of each workflow as last read
        self.exports: list[Any] = []
        self.jobs: list[str] = []  # background jobs started, newest last
        self.refusals = Refused(rng, hostile.operators)

    # -- one call, with crash detection ---------------------------------------------------------------
    async def call(self, tool: str, arguments: dict[str, Any], *, counted: bool = True) -> Outcome:
        self.errors.take()
        started = time.perf_counter()
        crash: str | None = None
        try:
            result = await self.client.call_tool(tool, arguments)
            outcome = Outcome(not result.is_error, result.structured_content, result_text(result))
        except MCPError as error:
            outcome = Outcome(False, None, error.error.message)
            if error.code == INTERNAL_ERROR:
                crash = f"internal error {error.error.message[:200]!r}"
        except Exception as error:
            outcome = Outcome(False, None, "")
            crash = f"client raised {type(error).__name__}: {str(error)[:200]}"
        if counted:
            self.findings.calls += 1
            self.findings.timed(tool, time.perf_counter() - started)
        refusal = outcome.message if not outcome.ok else (outcome.content or {}).get("message", "")
        if not outcome.ok or (outcome.content or {}).get("ok") is False:
            self.findings.error_message(f"[{self.label}] {tool}({preview(arguments)})", str(refusal))
        logged = self.errors.take()
        if logged and crash is None:
            crash = "server logged " + "; ".join(logged)[:400]
        if crash is not None:
            self.findings.crashes.append(f"[{self.label}] {tool}({preview(arguments)}): {crash}")
        return outcome

    async def detail(self, workflow_id: str) -> dict[str, Any] | None:
        outcome = await self.call("get_workflow", {"workflow_id": workflow_id}, counted=False)
        if not outcome.ok or outcome.content is None:
            return None
        self.nodes[workflow_id] = [node["id"] for node in outcome.content["state"]["nodes"]]
        return outcome.content

    def partial(self, what: str) -> None:
        self.findings.partial_edits.append(f"[{self.label}] {what}")

    # -- choosing arguments -------------------------------------------------------------------------------
    def workflow_id(self) -> Any:
        if self.ids and self.rng.random() < 0.85:
            open_ids = [i for i in self.ids if i not in self.done]
            pool = open_ids if open_ids and self.rng.random() < 0.85 else self.ids
            return self.rng.choice(pool)
        unknown = f"wf_{self.rng.getrandbits(64):016x}"
        return self.hostile.pick(unknown, "", "wf_\ud800", "x" * 70, "../../etc/passwd", 17, None)

    def arguments(self, tool: str) -> dict[str, Any]:
        h = self.hostile
        wid = self.workflow_id()
        nodes = self.nodes.get(wid, []) if isinstance(wid, str) else []
        maybe = self.rng.random
        if tool == "act":
            return {"workflow_id": wid, "text": h.act_text(nodes)}
        if tool == "add_operator":
            args: dict[str, Any] = {"workflow_id": wid, "operator": h.operator()}
            if maybe() < 0.5:
                args["prompt"] = h.text()
            if maybe() < 0.2:
                args["position"] = h.number()
            return args
        if tool == "add_structure":
            return {"workflow_id": wid} | h.structure()
        if tool == "delete_node":
            return {"workflow_id": wid, "node_id": h.node_id(nodes), "with_parent": h.pick(True, False)}
        if tool == "modify_node":
            args = {"workflow_id": wid, "node_id": h.node_id(nodes), "operator": h.operator()}
            if maybe() < 0.5:
                args["prompt"] = h.text()
            return args
        if tool == "set_prompt":
            return {"workflow_id": wid, "node_id": h.node_id(nodes), "prompt": h.text()}
        if tool == "finish":
            return {"workflow_id": wid} | ({"answer": h.text()} if maybe() < 0.5 else {})
        if tool == "export_workflow":
            return {"workflow_id": wid, "format": h.pick("json", "json", "dsl", "mermaid", "python", "")}
        if tool in ("get_workflow", "run_workflow", "delete_workflow"):
            return {"workflow_id": wid}
        if tool == "create_workflow":
            args = {"task": h.text(), "task_type": h.pick("auto", "math", "code", "qa", "general", "poetry")}
            if maybe() < 0.3:
                args["entry_point"] = h.pick("solve", h.text()[:300], "9" * 5000)
            if maybe() < 0.3:
                args["public_tests"] = h.pick("assert solve() == 391", h.text())
            if (options := h.options()) is not None:
                args["options"] = options
            if maybe() < 0.15:
                args["library_workflow"] = h.pick(*LIBRARY_NAMES, h.text()[:80])
            return args
        if tool == "solve":
            args = {"task": h.text(), "task_type": h.pick("auto", "math", "code", "qa", "general", "poetry")}
            if maybe() < 0.6:
                args["workflow"] = h.pick(*LIBRARY_NAMES, h.text()[:100])
            return args
        if tool == "list_library":
            return {} if maybe() < 0.5 else {"task_type": h.pick("code", "math", "qa", "general", "poetry", None)}
        if tool == "start_job":
            inner = h.pick(*JOB_TOOLS, h.text()[:70])
            return {"name": inner, "arguments": self.arguments(inner) if inner in JOB_TOOLS else {"workflow_id": wid}}
        if tool in ("get_job", "cancel_job"):
            known_job = self.jobs[-1] if self.jobs else "job_" + "0" * 32
            return {"job_id": h.pick(known_job, f"job_{self.rng.getrandbits(128):032x}", h.text()[:100], "", 7)}
        if tool == "import_workflow":
            args = {"spec": h.spec(self.exports), "task": h.text()}
            if maybe() < 0.3:
                args["format"] = h.pick("auto", "json", "dsl", "xml")
            if (options := h.options()) is not None:
                args["options"] = options
            return args
        return {}

    # -- checks ---------------------------------------------------------------------------------------------
    async def checked(self, tool: str, arguments: dict[str, Any]) -> Outcome:
        if tool == "start_job":
            return await self.checked_job(arguments)
        workflow_id = arguments.get("workflow_id")
        known = isinstance(workflow_id, str) and workflow_id in self.ids
        before = await self.detail(workflow_id) if known and isinstance(workflow_id, str) else None
        outcome = await self.call(tool, arguments)
        await self.verify(tool, arguments, outcome, before)
        return outcome

    async def checked_job(self, arguments: dict[str, Any]) -> Outcome:
        """A background job must do exactly what its direct call would: check its result the same way."""
        inner, inner_args = arguments.get("name"), arguments.get("arguments")
        workflow_id = inner_args.get("workflow_id") if isinstance(inner_args, dict) else None
        known = isinstance(workflow_id, str) and workflow_id in self.ids
        before = await self.detail(workflow_id) if known and isinstance(workflow_id, str) else None
        started = await self.call("start_job", arguments)
        if not started.ok or started.content is None:
            await self.verify(str(inner), dict(inner_args or {}), started, before)
            return started
        job = started.content
        self.jobs.append(job["job_id"])
        while job["status"] == "working":
            polled = await self.call("get_job", {"job_id": job["job_id"], "wait_s": 30}, counted=False)
            if not polled.ok or polled.content is None:
                self.findings.crashes.append(f"[{self.label}] get_job({job['job_id']}) failed: {polled.message[:200]}")
                return polled
            job = polled.content
        if job["status"] == "failed":
            self.findings.error_message(f"[{self.label}] job {inner}({preview(inner_args)})", str(job["error"]))
        outcome = Outcome(job["status"] == "completed", job["result"], job["error"] or "")
        await self.verify(str(inner), dict(inner_args or {}), outcome, before)
        return outcome

    async def verify(
        self, tool: str, arguments: dict[str, Any], outcome: Outcome, before: dict[str, Any] | None
    ) -> None:
        """What a call may have changed: nothing when it failed or only read; one round when it stepped."""
        workflow_id = arguments.get("workflow_id")
        if tool in ("create_workflow", "import_workflow"):
            await self.after_create(tool, arguments, outcome)
            return
        if tool == "solve":
            if outcome.ok and outcome.content is not None:
                await self.after_create(tool, arguments, outcome)
                self.done.add(outcome.content["workflow_id"])
            return
        if before is None or not isinstance(workflow_id, str):
            if outcome.ok and tool not in NO_WORKFLOW_TOOLS:
                self.partial(f"{tool} succeeded on an unknown workflow_id {preview(workflow_id)}")
            return
        after = await self.detail(workflow_id)
        if tool == "delete_workflow":
            if outcome.ok:
                self.forget(workflow_id)
                if after is not None:
                    self.partial(f"delete_workflow({workflow_id}) succeeded but the workflow is still readable")
            return
        if after is None:
            self.partial(f"{tool}({preview(arguments)}): workflow {workflow_id} became unreadable")
            self.forget(workflow_id)
            return
        if outcome.ok and tool == "export_workflow" and arguments.get("format") == "json" and outcome.content:
            self.remember_export(outcome.content.get("content"))
        if not outcome.ok or tool in READ_TOOLS:
            if durable(after) != durable(before):
                changed = sorted(k for k in durable(before) if durable(before)[k] != durable(after)[k])
                reason = "failed" if not outcome.ok else "only read"
                self.partial(
                    f"{tool}({preview(arguments)}) {reason} but changed {', '.join(changed)}: {outcome.message[:160]!r}"
                )
            return
        if tool == "run_workflow":
            if after["graph"] != before["graph"] or after["state"]["round"] != before["state"]["round"]:
                self.partial(f"run_workflow({workflow_id}) changed the graph or the round")
            return
        if tool in STEP_TOOLS:
            self.check_step(tool, arguments, outcome, before, after)
        await self.check_store(workflow_id, after)

    def check_step(
        self, tool: str, arguments: dict[str, Any], outcome: Outcome, before: dict[str, Any], after: dict[str, Any]
    ) -> None:
        step = outcome.content or {}
        what = f"{tool}({preview(arguments)})"
        if step.get("state") != after["state"]:
            self.partial(f"{what} reported a state other than the stored one")
        if (
            after["state"]["round"] != before["state"]["round"] + 1
            or after["history_length"] != before["history_length"] + 1
        ):
            self.partial(
                f"{what} succeeded but the round went {before['state']['round']} -> {after['state']['round']} and the "
                f"history {before['history_length']} -> {after['history_length']}"
            )
        if step.get("ok") is False and after["graph"] != before["graph"]:
            self.partial(f"{what} reported ok=false but changed the graph")
        if step.get("ok") is True and tool in ADDING_TOOLS and node_count(after) <= node_count(before):
            self.partial(f"{what} reported ok=true but added no node")
        if step.get("done"):
            self.done.add(str(arguments["workflow_id"]))

    async def check_store(self, workflow_id: str, detail: dict[str, Any]) -> None:
        """With SQLite, every few calls: the file holds exactly the live state (memory and store agree)."""
        if self.database is None or self.rng.random() > 0.1:
            return
        store = SQLiteStore(self.database)
        try:
            record = await store.get(workflow_id)
        finally:
            await store.close()
        if record is None:
            self.partial(f"workflow {workflow_id} is live but missing from the SQLite file")
            return
        view = Canvas(record.state, self.app.bench.registry).view().model_dump(mode="json")
        if view != detail["state"] or len(record.state.history) != detail["history_length"]:
            self.partial(f"workflow {workflow_id}: the SQLite file disagrees with the live state")

    async def after_create(self, tool: str, arguments: dict[str, Any], outcome: Outcome) -> None:
        if not outcome.ok or outcome.content is None:
            return
        workflow_id = outcome.content["workflow_id"]
        self.ids.append(workflow_id)
        detail = await self.detail(workflow_id)
        if detail is None:
            self.partial(f"{tool}({preview(arguments)}) acknowledged {workflow_id}, which cannot be read")
        elif "state" in outcome.content and detail["state"] != outcome.content["state"]:
            self.partial(f"{tool}({preview(arguments)}) reported a state other than the stored one")
        elif tool == "solve" and detail["state"]["dsl"] != outcome.content["dsl"]:
            self.partial(f"solve({preview(arguments)}) reported a workflow other than the stored one")

    def forget(self, workflow_id: str) -> None:
        if workflow_id in self.ids:
            self.ids.remove(workflow_id)
        self.done.discard(workflow_id)
        self.nodes.pop(workflow_id, None)

    def remember_export(self, content: object) -> None:
        if isinstance(content, str) and len(self.exports) < 40:
            try:
                self.exports.append(json.loads(content))
            except ValueError:
                self.partial("export_workflow(json) returned text that is not JSON")

    async def seed_exports(self) -> None:
        """Valid exports to mutate for import_workflow: a few real workflows built through the tools."""
        for dsl in (
            "Plan -> Custom",
            "Plan -> [Programmer, Custom] -> Verify ? Revise : Format -> (Test -> Revise) * 2",
        ):
            outcome = await self.call("import_workflow", {"spec": dsl, "task": "What is 17 * 23?"}, counted=False)
            if not outcome.ok or outcome.content is None:
                raise RuntimeError(f"could not import a valid workflow to start from: {outcome.message[:300]}")
            workflow_id = outcome.content["workflow_id"]
            exported = await self.call("export_workflow", {"workflow_id": workflow_id, "format": "json"}, counted=False)
            self.remember_export((exported.content or {}).get("content"))
            await self.call("delete_workflow", {"workflow_id": workflow_id}, counted=False)

    # -- other entry points -----------------------------------------------------------------------------
    async def resource_or_prompt(self) -> None:
        """A resource read or a prompt get: unknown ones must be clean MCP errors, never internal ones."""
        self.errors.take()
        self.findings.calls += 1
        wid, h = self.workflow_id(), self.hostile
        if not isinstance(wid, str) or not wid.isascii():
            wid = f"wf_{self.rng.getrandbits(64):016x}"  # the client sends the URI in a header: ASCII only
        crash: str | None = None
        if self.rng.random() < 0.5:
            uri = h.pick(
                f"flowsteer://workflows/{wid}", f"flowsteer://workflows/{wid}/mermaid", "flowsteer://operators"
            )
            uri = h.pick(uri, uri, "flowsteer://nothing", "file:///etc/passwd")
            what = f"read_resource({uri!r})"
            request: Callable[[], Awaitable[object]] = lambda: self.client.read_resource(uri)  # noqa: E731
        else:
            arguments = {
                key: value
                for key, value in (
                    ("task", h.text()),
                    ("task_type", h.pick("auto", "x")),
                    ("finish", h.pick("paper", "y")),
                )
                if self.rng.random() < 0.7
            }
            name = h.pick("flow_director", "flow_director", "nope")
            what = f"get_prompt({name!r}, {preview(arguments)})"
            request = lambda: self.client.get_prompt(name, arguments)  # noqa: E731
        try:
            await request()
        except MCPError as error:
            self.findings.error_message(f"[{self.label}] {what}", error.error.message)
            if error.code == INTERNAL_ERROR:
                crash = f"internal error {error.error.message[:200]!r}"
        except Exception as error:
            crash = f"client raised {type(error).__name__}: {str(error)[:200]}"
        if (logged := self.errors.take()) and crash is None:
            crash = "server logged " + "; ".join(logged)[:400]
        if crash is not None:
            self.findings.crashes.append(f"[{self.label}] {what}: {crash}")

    async def refused(self) -> None:
        """A call past a bound (see `Refused`): it must fail, say why, and leave every workflow as it was."""
        open_ids = [i for i in self.ids if i not in self.done]
        if not open_ids:
            outcome = await self.call("create_workflow", {"task": TASK}, counted=False)
            if not outcome.ok or outcome.content is None:
                return
            await self.after_create("create_workflow", {"task": TASK}, outcome)
            open_ids = [outcome.content["workflow_id"]]
        why, tool, arguments = self.refusals.call(self.rng.choice(open_ids))
        held = await self.workflow_ids()
        outcome = await self.checked(tool, arguments)
        what = f"[{self.label}] {tool}({preview(arguments)})"
        if outcome.ok:  # even an ok=false step would have cost a round
            self.findings.accepted.append(f"{what} ({why}) was accepted")
            return
        self.findings.refused += 1
        if not any(reason in outcome.message for reason in REFUSED_BECAUSE[why]):
            self.findings.accepted.append(f"{what} ({why}) was refused for another reason: {preview(outcome.message)}")
        if tool in ("create_workflow", "import_workflow") and await self.workflow_ids() != held:
            self.partial(f"{what} was refused but the workflows changed")

    async def refused_protocol(self) -> None:
        """A long unknown tool, prompt or resource name, or prompt arguments past their bounds: a JSON-RPC error
        (never an internal one) whose message is short."""
        self.errors.take()
        self.findings.calls += 1
        long = "z" * self.rng.randrange(MAX_URI_CHARS, 200_000)
        bad = self.rng.choice(SURROGATES)
        choice = self.rng.randrange(4)
        if choice == 0:
            what = f"call_tool({preview(long)})"
            request: Callable[[], Awaitable[object]] = lambda: self.client.call_tool(long, {})  # noqa: E731
        elif choice == 1:
            uri = self.rng.choice(("flowsteer://workflows/", "flowsteer://", "file:///")) + long
            what = f"read_resource({preview(uri)})"
            request = lambda: self.client.read_resource(uri)  # noqa: E731
        else:
            name = long if choice == 2 else "flow_director"
            arguments = self.rng.choice(
                (
                    {"task": TASK, "bogus": "1"},
                    {"task": "x" * (MAX_PROMPT_ARGUMENT_CHARS + 1)},
                    {"task": TASK, "task_type": long[:MAX_PROMPT_ARGUMENT_CHARS]},
                    {"task": TASK + bad},
                    {"task": TASK, "finish": "paper" + bad},
                )
            )
            what = f"get_prompt({preview(name)}, {preview(arguments)})"
            request = lambda: self.client.get_prompt(name, arguments)  # noqa: E731
        crash: str | None = None
        try:
            await request()
            self.findings.accepted.append(f"[{self.label}] {what} was accepted")
        except MCPError as error:
            self.findings.error_message(f"[{self.label}] {what}", error.error.message)
            self.findings.refused += 1
            if error.code == INTERNAL_ERROR:
                crash = f"internal error {error.error.message[:200]!r}"
        except Exception as error:
            crash = f"client raised {type(error).__name__}: {str(error)[:200]}"
        if (logged := self.errors.take()) and crash is None:
            crash = "server logged " + "; ".join(logged)[:400]
        if crash is not None:
            self.findings.crashes.append(f"[{self.label}] {what}: {crash}")

    async def workflow_ids(self) -> list[str]:
        listed = await self.call("list_workflows", {}, counted=False)
        return sorted(w["workflow_id"] for w in (listed.content or {}).get("workflows", []))

    async def create_burst(self) -> None:
        """More concurrent creates than the server may hold: it must never end up holding more."""
        size = MAX_WORKFLOWS + 8
        created: list[str] = []

        async def create(k: int) -> None:
            outcome = await self.call("create_workflow", {"task": f"Burst task {k}"})
            if outcome.ok and outcome.content:
                created.append(outcome.content["workflow_id"])

        async with anyio.create_task_group() as group:
            for k in range(size):
                group.start_soon(create, k)
        listed = await self.call("list_workflows", {}, counted=False)
        held = len((listed.content or {}).get("workflows", []))
        if held > MAX_WORKFLOWS:
            self.findings.limit_breaches.append(
                f"[{self.label}] {size} concurrent creates left {held} workflows (max {MAX_WORKFLOWS})"
            )
        for workflow_id in created:
            await self.call("delete_workflow", {"workflow_id": workflow_id}, counted=False)

    async def run(self, calls: int) -> None:
        tools = {
            "act": 24, "add_operator": 8, "add_structure": 8, "delete_node": 5, "modify_node": 5, "set_prompt": 5,
            "run_workflow": 3, "finish": 4, "get_workflow": 3, "export_workflow": 4, "create_workflow": 8,
            "import_workflow": 10, "delete_workflow": 2, "list_workflows": 1, "list_operators": 1, "resource": 3,
            "unknown": 1, "refused": 10, "refused_protocol": 2, "solve": 2, "list_library": 1, "start_job": 4,
            "get_job": 1, "cancel_job": 1,
        }  # fmt: skip
        names, weights = list(tools), list(tools.values())
        burst_every = max(50, calls // 4)
        for k in range(calls):
            if k % burst_every == burst_every - 1:
                await self.create_burst()
                continue
            if len(self.ids) >= MAX_WORKFLOWS - 1 or (len(self.done) > 3 and self.rng.random() < 0.3):
                victim = self.rng.choice(sorted(self.done) or self.ids)
                await self.checked("delete_workflow", {"workflow_id": victim})
                continue
            tool = self.rng.choices(names, weights)[0]
            if tool == "resource":
                await self.resource_or_prompt()
            elif tool == "refused":
                await self.refused()
            elif tool == "refused_protocol":
                await self.refused_protocol()
            elif tool == "unknown":
                await self.call("no_such_tool", {})
            else:
                await self.checked(tool, self.arguments(tool))
        if self.app.bench.lock_count:
            self.findings.leaks.append(
                f"[{self.label}] {self.app.bench.lock_count} lock entries left on an idle server"
            )


async def fuzz(args: argparse.Namespace, findings: Findings, errors: ServerErrors) -> None:
    registry = default_registry()
    operators = registry.names()
    for label in ("memory", "sqlite"):
        rng = random.Random(f"{args.seed}-{label}")
        with tempfile.TemporaryDirectory(prefix="hostile-load-") as tmp:
            database = Path(tmp) / "fuzz.sqlite" if label == "sqlite" else None
            store = SQLiteStore(database) if database else MemoryStore()
            app = build_server(
                ServerSettings(max_workflows=MAX_WORKFLOWS), registry=registry, runner=EchoRunner(), store=store
            )
            try:
                async with Client(app.mcp) as client:
                    fuzzer = Fuzzer(
                        client, app, errors, findings, rng, Hostile(rng, operators, args.quick), label, database
                    )
                    await fuzzer.seed_exports()
                    await fuzzer.run(args.calls // 2)
            finally:
                await app.aclose()


# ----- the footprint of a worst-case create ---------------------------------------------------------------

# (text character, identifier character): 1 byte in memory and on disk; 4 bytes in both; 1 byte in memory but 6
# on disk (JSON writes a control character as \u0001). Each payload is measured in all three.
ALPHABETS = {"ascii": ("x", "x"), "4-byte": ("\U0001f600", "\U0001d465"), "control": ("\x01", "x")}


@dataclass
class Footprint:
    workflows: int = 0
    memory: tuple[float, str] = (0.0, "")  # bytes of server memory per workflow, and the alphabet of the worst
    row: tuple[float, str] = (0.0, "")  # bytes of SQLite row (state and history) per workflow
    built: tuple[float, str] = (0.0, "")  # memory of an import with the graph at its limits (reported only)


def worst_case_create(alphabet: str, k: int, names: list[str]) -> dict[str, Any]:
    """create_workflow arguments with every field at its limit: task, entry point, public tests, and options
    with the longest preset and the most operator names (`names`: the library, cycled, in any case)."""
    char, letter = ALPHABETS[alphabet]
    head = f"{k} "  # each task its own string
    return {
        "task": head + char * (MAX_TASK_CHARS - len(head)),
        "entry_point": letter * LIMITS.max_entry_point_chars,
        "public_tests": char * LIMITS.max_public_tests_chars,
        "options": {
            "max_rounds": ServerSettings().max_rounds_cap,
            "finish": {
                "preset": char * MAX_PRESET_CHARS,
                "min_operators": LIMITS.max_operators,
                "require_structure": True,
                "require_solver": True,
                "require_checker": True,
                "verbose_output_chars": LIMITS.max_answer_chars,
                "solver_operators": names,
                "checker_operators": names,
            },
            "disabled_operators": names,
        },
    }


def full_graph_import(alphabet: str, k: int, registry_names: list[str]) -> dict[str, Any]:
    """import_workflow arguments whose graph is at its limits: the most operators, each with the longest prompt."""
    char, _ = ALPHABETS[alphabet]
    stages = [
        {
            "kind": "operator",
            "id": f"node_{n}",
            "operator": "Custom",
            "prompt": f"{k} {n} " + char * (LIMITS.max_prompt_chars - 12),
            "samples": 1,
        }
        for n in range(1, LIMITS.max_operators + 1)
    ]
    graph = {"stages": stages, "next_index": LIMITS.max_operators + 1}
    document = {"format": "flowsteer.workflow/v1", "dsl": " -> ".join(["Custom"] * len(stages)), "graph": graph}
    arguments = worst_case_create(alphabet, k, registry_names)
    arguments["options"].pop("disabled_operators")  # the graph needs an operator it may use
    return arguments | {"spec": json.dumps(document, ensure_ascii=False)}


class WorstCaseRefused(Exception):
    """A payload every bound allows was refused: the bounds and the limits disagree."""


def leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    found: list[BaseException] = []
    for error in group.exceptions:
        found.extend(leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    return found


async def create(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    if result.is_error or result.structured_content is None:
        raise WorstCaseRefused(f"the worst-case {tool} was refused: {result_text(result)[:300]}")
    return str(result.structured_content["workflow_id"])


async def retained_per_workflow(tool: str, count: int, arguments: Callable[[int], dict[str, Any]]) -> float:
    """Server memory each of `count` workflows keeps after its create (tracemalloc, after two warm-up creates)."""
    app = build_server(
        ServerSettings(max_workflows=count + 2),
        registry=default_registry(),
        runner=EchoRunner(),
        store=MemoryStore(),
    )
    try:
        async with Client(app.mcp) as client:
            for k in (-1, -2):  # every model, schema and cache a create builds, built before measuring
                workflow_id = await create(client, tool, arguments(k))
                await client.call_tool("delete_workflow", {"workflow_id": workflow_id})
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for k in range(count):
                    await create(client, tool, arguments(k))
                gc.collect()
                retained = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
    finally:
        await app.aclose()
    return retained / count


async def stored_per_workflow(count: int, arguments: Callable[[int], dict[str, Any]]) -> float:
    """The largest SQLite row (state plus history rows) of `count` worst-case creates, in bytes."""
    with tempfile.TemporaryDirectory(prefix="hostile-footprint-") as tmp:
        database = Path(tmp) / "footprint.sqlite"
        app = build_server(
            ServerSettings(max_workflows=count),
            registry=default_registry(),
            runner=EchoRunner(),
            store=SQLiteStore(database),
        )
        try:
            async with Client(app.mcp) as client:
                for k in range(count):
                    await create(client, "create_workflow", arguments(k))
        finally:
            await app.aclose()
        with sqlite3.connect(database) as conn:
            sizes = conn.execute(
                "SELECT length(CAST(state AS BLOB)) + coalesce((SELECT sum(length(CAST(entry AS BLOB))) FROM history"
                " AS h WHERE h.workflow_id = w.workflow_id), 0) FROM workflows AS w"
            ).fetchall()
        conn.close()
    return float(max(size for (size,) in sizes))


async def measure_footprint(args: argparse.Namespace, findings: Findings) -> Footprint:
    """Memory and SQLite row per workflow after the worst-case create, in each alphabet; over the bound is a
    finding. The same for an import whose graph is at its limits, reported but not bounded (see README)."""
    registry = default_registry().names()
    names = [name.upper() if k % 2 else name for k, name in zip(range(MAX_NAMES), itertools.cycle(registry))]
    result = Footprint(workflows=4 if args.quick else 16)
    for alphabet in ALPHABETS:

        def payload(k: int, alphabet: str = alphabet) -> dict[str, Any]:
            return worst_case_create(alphabet, k, names)

        def built(k: int, alphabet: str = alphabet) -> dict[str, Any]:
            return full_graph_import(alphabet, k, names)

        try:
            memory = await retained_per_workflow("create_workflow", result.workflows, payload)
            row = await stored_per_workflow(result.workflows, payload)
            # control text takes 1 byte a character in memory, like ascii, and its JSON escapes overflow an import
            graph = 0.0 if alphabet == "control" else await retained_per_workflow("import_workflow", 2, built)
        except* WorstCaseRefused as refused:  # raised inside the client's task group, so it may come grouped
            findings.footprint.extend(f"{alphabet} text: {error}" for error in leaves(refused))
        else:
            result.memory = max(result.memory, (memory, alphabet))
            result.row = max(result.row, (row, alphabet))
            result.built = max(result.built, (graph, alphabet))
    for what, (size, alphabet) in (("server memory", result.memory), ("SQLite row", result.row)):
        if size > FOOTPRINT_BOUND:
            findings.footprint.append(
                f"a worst-case create takes {size / 1024:.1f} KB of {what} per workflow ({alphabet} text); "
                f"the bound is {FOOTPRINT_BOUND // 1024} KB"
            )
    return result


# ----- the kill loop ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """`flowsteer-mcp --transport http --store sqlite:DB` on a free loopback port, stopped by its PID."""

    def __init__(self, database: Path, token: str, log_path: Path) -> None:
        self.database = database
        self.token = token
        self.log_path = log_path
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWSTEER_", "OPENAI_"))}
        env |= {"FLOWSTEER_MCP_TOKEN": self.token, "PYTHONPATH": str(REPO_ROOT)}
        command = [sys.executable, "-m", "flowsteer_mcp", "--transport", "http", "--host", "127.0.0.1"]
        command += [
            "--port",
            str(self.port),
            "--store",
            f"sqlite:{self.database}",
            "--no-executor",
            "--log-level",
            "WARNING",
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the server exited with {self.process.returncode} during start-up; see {self.log_path}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"the server did not listen within {READY_TIMEOUT_S:.0f} s; see {self.log_path}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()


@asynccontextmanager
async def http_client(url: str, token: str) -> AsyncIterator[Client]:
    timeout = httpx2.Timeout(30.0, read=60.0)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


class Writer:
    """Makes acknowledged edits on its own workflow, starting a new one when the episode ends."""

    def __init__(self, client: Client, ledger: KillLedger, rng: random.Random, workflow_id: str | None) -> None:
        self.client = client
        self.ledger = ledger
        self.rng = rng
        self.workflow_id = workflow_id

    async def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.call_tool(name, arguments)
        if result.is_error or result.structured_content is None:
            raise RuntimeError(f"{name} failed while the server was up: {result_text(result)[:300]}")
        return result.structured_content

    async def new_workflow(self) -> None:
        created = await self.tool(
            "create_workflow", {"task": "What is 17 * 23?", "options": {"max_rounds": 200, "finish": "relaxed"}}
        )
        self.workflow_id = created["workflow_id"]
        self.ledger.ack(self.workflow_id, created["state"]["round"], created["state"]["dsl"])

    async def edit(self) -> None:
        if self.workflow_id is None:
            await self.new_workflow()
        assert self.workflow_id is not None
        detail = await self.tool("get_workflow", {"workflow_id": self.workflow_id})
        state = detail["state"]
        if state["status"] in ("finished", "exhausted") or state["round"] >= state["max_rounds"] - 1:
            await self.new_workflow()
            return
        nodes = [n["id"] for n in state["nodes"] if n.get("parent") is None]
        operator = self.rng.choice(SAFE_OPERATORS)
        choice = self.rng.randrange(4)
        if len(nodes) >= 6 or (nodes and choice == 0):
            name, arguments = "delete_node", {"node_id": self.rng.choice(nodes)}
        elif nodes and choice == 1:
            name, arguments = (
                "set_prompt",
                {"node_id": self.rng.choice(nodes), "prompt": f"Step {state['round']}: be precise."},
            )
        elif choice == 2:
            name, arguments = (
                "act",
                {
                    "text": f"<action>add</action><operator>{operator}</operator><prompt>Round {state['round']}.</prompt>"
                },
            )
        else:
            name, arguments = "add_operator", {"operator": operator}
        step = await self.tool(name, {"workflow_id": self.workflow_id} | arguments)
        self.ledger.ack(self.workflow_id, step["state"]["round"], step["state"]["dsl"])

    async def run(self) -> None:
        while True:
            await self.edit()


async def drive_until_killed(
    server: ServerProcess, ledger: KillLedger, rng: random.Random, writers: list[str | None], edits: tuple[int, int]
) -> list[str | None]:
    """Edit concurrently on several workflows; after a random number of acknowledged edits and a random few
    milliseconds more (so the kill lands inside requests), SIGKILL the server. Returns each writer's workflow."""
    crew: list[Writer] = []
    with anyio.CancelScope() as scope:
        try:
            async with http_client(server.url, server.token) as client, anyio.create_task_group() as group:
                crew = [Writer(client, ledger, random.Random(rng.random()), wid) for wid in writers]
                for writer in crew:
                    group.start_soon(writer.run)
                with anyio.fail_after(STALL_TIMEOUT_S):
                    await ledger.wait_for(rng.randrange(*edits))
                await anyio.sleep(rng.uniform(0.0, 0.03))
                server.kill()
                ledger.kills += 1
                scope.cancel()
        except Exception:  # whatever the dying connection raises after the kill: those edits were not acknowledged
            if server.process is not None and server.process.poll() is None:
                raise
    return [writer.workflow_id for writer in crew] or writers


async def count_lost(server: ServerProcess, ledger: KillLedger) -> None:
    """After a restart: every acknowledged edit must be there (the unacknowledged last one may be too)."""
    async with http_client(server.url, server.token) as client:
        for workflow_id in sorted(ledger.known):
            edits = ledger.pending.pop(workflow_id, [])
            result = await client.call_tool("get_workflow", {"workflow_id": workflow_id})
            if result.is_error or result.structured_content is None:
                ledger.known.discard(workflow_id)
                ledger.lose(max(1, len(edits)), f"workflow {workflow_id} is gone after a restart")
                continue
            if not edits:
                continue
            state = result.structured_content["state"]
            restored, (last_round, last_dsl) = state["round"], edits[-1]
            lost = [edit for edit in edits if edit[0] > restored]
            if lost:
                ledger.lose(
                    len(lost), f"workflow {workflow_id}: restored at round {restored}, acknowledged {last_round}"
                )
            elif restored == last_round and state["dsl"] != last_dsl:
                ledger.lose(
                    1, f"workflow {workflow_id}: round {restored} restored as {state['dsl']!r}, not {last_dsl!r}"
                )
            elif restored > last_round + 1:
                ledger.lose(
                    0, f"workflow {workflow_id}: restored at round {restored}, past the acknowledged {last_round}"
                )


async def kill_loop(args: argparse.Namespace, ledger: KillLedger) -> None:
    rng = random.Random(f"{args.seed}-kill")
    edits = (20, 80) if args.quick else (50, 160)
    with tempfile.TemporaryDirectory(prefix="hostile-kill-") as tmp:
        server = ServerProcess(Path(tmp) / "kill.sqlite", secrets.token_urlsafe(24), Path(tmp) / "server.log")
        writers: list[str | None] = [None, None, None]
        try:
            server.start()
            for _ in range(args.kills):
                writers = await drive_until_killed(server, ledger, rng, writers, edits)
                server.start()
                await count_lost(server, ledger)
                writers = [wid if wid in ledger.known else None for wid in writers]  # a lost workflow: start anew
            server.stop()
            if args.kills:  # a graceful stop loses nothing either
                server.start()
                await count_lost(server, ledger)
        except Exception as error:
            log_tail = server.log_path.read_text(errors="replace")[-2000:] if server.log_path.exists() else ""
            raise RuntimeError(f"kill loop: {type(error).__name__}: {error}\n{log_tail}") from error
        finally:
            server.stop()


# ----- main --------------------------------------------------------------------------------------------


def report(findings: Findings, ledger: KillLedger, footprint: Footprint, elapsed: float) -> int:
    """The findings; then the figures, only when there were none (a figure from a failing run looks like a result)."""
    sections = (
        ("crash", findings.crashes),
        ("partial edit", findings.partial_edits),
        ("limit breach", findings.limit_breaches),
        ("leak", findings.leaks),
        ("accepted", findings.accepted),
        ("long error", findings.long_errors),
        ("footprint", findings.footprint),
        ("lost edit", ledger.lost),
    )
    for name, items in sections:
        for item in items[:SHOWN_PER_KIND]:
            print(f"{name}: {item}")
        if len(items) > SHOWN_PER_KIND:
            print(f"... and {len(items) - SHOWN_PER_KIND} more of kind {name!r}")
    if not findings.clean or ledger.lost:
        found = sum(len(items) for _, items in sections)
        print(f"hostile_load: {found} finding(s) in {findings.calls} fuzz calls; no figures printed.", file=sys.stderr)
        return 1
    seconds, tool = findings.slowest
    print("calls per tool: " + ", ".join(f"{name} {count}" for name, count in findings.per_tool.most_common()))
    if tool:
        print(f"slowest fuzz call: {tool} {seconds:.2f} s")
    print(f"total {elapsed:.0f} s")
    length, where = findings.longest_error
    print(
        f"strict input: {findings.refused} calls past a bound refused, none accepted; longest error message "
        f"{length} characters ({where}; bound {MAX_ERROR_CHARS})"
    )
    (memory, in_memory), (row, on_disk), (built, in_built) = footprint.memory, footprint.row, footprint.built
    print(
        f"footprint: a worst-case create keeps {memory / 1024:.1f} KB of server memory per workflow ({in_memory} "
        f"text, {footprint.workflows} workflows) and a {row / 1024:.1f} KB SQLite row ({on_disk} text); bound "
        f"{FOOTPRINT_BOUND // 1024} KB"
    )
    print(
        f"footprint: an import with its graph at the limits ({LIMITS.max_operators} operators with "
        f"{LIMITS.max_prompt_chars}-character prompts) keeps {built / 1024:.1f} KB per workflow ({in_built} text; "
        "reported, not bounded)"
    )
    print(
        f"fuzz: {findings.calls} calls, {len(findings.crashes)} crashes, {len(findings.partial_edits)} partial edits, "
        f"{len(findings.limit_breaches)} limit breaches; kill loop: {ledger.kills} kills, "
        f"{ledger.kept}/{ledger.acknowledged} acknowledged edits kept"
    )
    return 0


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument(
        "--calls", type=int, default=None, help="fuzz calls, split between the two stores (default 6000; quick 800)"
    )
    parser.add_argument("--kills", type=int, default=None, help="SIGKILLs of the HTTP server (default 10; quick 3)")
    parser.add_argument("--quick", action="store_true", help="small and fast (under a minute on 2 cores)")
    args = parser.parse_args()
    args.calls = args.calls if args.calls is not None else (800 if args.quick else 6000)
    args.kills = args.kills if args.kills is not None else (3 if args.quick else 10)
    errors = ServerErrors()
    errors.install()
    findings, ledger = Findings(), KillLedger()
    started = time.monotonic()
    try:
        await fuzz(args, findings, errors)
        footprint = await measure_footprint(args, findings)
        await kill_loop(args, ledger)
    except Exception as error:
        traceback.print_exc()
        print(f"hostile_load: the harness failed: {error}", file=sys.stderr)
        return HARNESS_FAILED_EXIT
    return report(findings, ledger, footprint, time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
