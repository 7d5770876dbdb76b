"""The workflow DSL: `Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format`.

    workflow  := "" | stage { " -> " stage }
    stage     := OP | "[" OP { ", " OP } "]" | OP " ? " OP " : " ( OP | "done" ) | "(" OP { " -> " OP } ") * " INT

`render` is canonical; `parse_dsl` accepts any spacing and returns stage blueprints without ids (prompts do
not live in the DSL; the JSON export carries them). `render(build(parse_dsl(text)))` reproduces canonical text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flowsteer_mcp.canvas.blueprint import (
    ConditionalBlueprint,
    LoopBlueprint,
    OperatorBlueprint,
    ParallelBlueprint,
    StageBlueprint,
)
from flowsteer_mcp.canvas.model import (
    ConditionalStage,
    LoopStage,
    OperatorNode,
    ParallelStage,
    Stage,
    WorkflowGraph,
)

ARROW = " -> "


def render_stage(stage: Stage) -> str:
    if isinstance(stage, ParallelStage):
        return "[" + ", ".join(b.operator for b in stage.branches) + "]"
    if isinstance(stage, ConditionalStage):
        on_pass = stage.on_pass.operator if stage.on_pass else "done"
        return f"{stage.check.operator} ? {stage.on_fail.operator} : {on_pass}"
    if isinstance(stage, LoopStage):
        return "(" + ARROW.join(b.operator for b in stage.body) + f") * {stage.count}"
    assert isinstance(stage, OperatorNode)
    return stage.operator


def render(graph: WorkflowGraph) -> str:
    return ARROW.join(render_stage(stage) for stage in graph.stages)


class DSLSyntaxError(ValueError):
    """Malformed DSL text; the message says where and what was expected."""


_TOKEN = re.compile(r"\s*(?:(->)|([\[\](),?:*])|(\d+)|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass
class _Token:
    kind: str  # "arrow" | "punct" | "int" | "name" | "end"
    text: str
    pos: int


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None:
            raise DSLSyntaxError(f"unexpected character {text[pos:].lstrip()[:1]!r} at position {pos}")
        arrow, punct, integer, name = match.groups()
        start = match.end() - len(match.group(0).lstrip())
        if arrow:
            tokens.append(_Token("arrow", arrow, start))
        elif punct:
            tokens.append(_Token("punct", punct, start))
        elif integer:
            tokens.append(_Token("int", integer, start))
        else:
            tokens.append(_Token("name", name, start))
        pos = match.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokenize(text)
        self.index = 0

    def peek(self) -> _Token:
        return self.tokens[self.index]

    def take(self, kind: str, text: str | None = None) -> _Token:
        token = self.peek()
        if token.kind != kind or (text is not None and token.text != text):
            wanted = repr(text) if text else kind
            found = repr(token.text) if token.kind != "end" else "end of text"
            raise DSLSyntaxError(f"expected {wanted} at position {token.pos}, found {found}")
        self.index += 1
        return token

    def at(self, kind: str, text: str | None = None) -> bool:
        token = self.peek()
        return token.kind == kind and (text is None or token.text == text)

    def workflow(self) -> list[StageBlueprint]:
        if self.at("end"):
            return []
        stages = [self.stage()]
        while self.at("arrow"):
            self.take("arrow")
            stages.append(self.stage())
        self.take("end")
        return stages

    def operator(self) -> str:
        token = self.take("name")
        if token.text == "done":
            raise DSLSyntaxError(f"'done' is only allowed as the pass branch of a conditional (position {token.pos})")
        return token.text

    def stage(self) -> StageBlueprint:
        if self.at("punct", "["):
            self.take("punct", "[")
            ops = [self.operator()]
            while self.at("punct", ","):
                self.take("punct", ",")
                ops.append(self.operator())
            self.take("punct", "]")
            return ParallelBlueprint(operators=ops)
        if self.at("punct", "("):
            self.take("punct", "(")
            ops = [self.operator()]
            while self.at("arrow"):
                self.take("arrow")
                ops.append(self.operator())
            self.take("punct", ")")
            self.take("punct", "*")
            count = int(self.take("int").text)
            return LoopBlueprint(operators=ops, count=count)
        first = self.operator()
        if self.at("punct", "?"):
            self.take("punct", "?")
            on_fail = self.operator()
            self.take("punct", ":")
            token = self.take("name")
            return ConditionalBlueprint(
                check=first, on_fail=on_fail, on_pass=None if token.text == "done" else token.text
            )
        return OperatorBlueprint(operator=first)


def parse_dsl(text: str) -> list[StageBlueprint]:
    """Parse DSL text into stage blueprints. Operator names are checked later, against the registry."""
    return _Parser(text).workflow()
