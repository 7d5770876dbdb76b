"""The workflow DSL: `Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format`.

    workflow  := "" | stage { " -> " stage }
    stage     := DRAWN | "[" DRAWN { ", " DRAWN } "]" | OP " ? " OP " : " ( OP | "done" ) | "(" OP { " -> " OP } ") * " INT
    DRAWN     := OP [ "{" INT "}" ]

`Programmer{3}` is a node with `samples: 3` (three draws whose answers become candidates for the next stage,
e.g. `Programmer{3} -> ScEnsemble`); one draw renders without braces. Samples exist only on an operator stage
and on parallel branches, so braces anywhere else are a syntax error. `render` is canonical; `parse_dsl` accepts any spacing and returns stage blueprints without ids (prompts do
not live in the DSL; the JSON export carries them). `render(build(parse_dsl(text)))` reproduces canonical text.

Parsing is linear and lazy: tokens are matched in place (never by copying the rest of the text) and pulled
one at a time, so junk fails at its first bad token; loop counts are digit-capped before `int()`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
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
from flowsteer_mcp.canvas.numbers import MAX_DIGITS, parse_bounded_int
from flowsteer_mcp.canvas.text import excerpt

ARROW = " -> "


def render_drawn(node: OperatorNode) -> str:
    return f"{node.operator}{{{node.samples}}}" if node.samples > 1 else node.operator


def render_stage(stage: Stage) -> str:
    if isinstance(stage, ParallelStage):
        return "[" + ", ".join(render_drawn(b) for b in stage.branches) + "]"
    if isinstance(stage, ConditionalStage):
        on_pass = stage.on_pass.operator if stage.on_pass else "done"
        return f"{stage.check.operator} ? {stage.on_fail.operator} : {on_pass}"
    if isinstance(stage, LoopStage):
        return "(" + ARROW.join(b.operator for b in stage.body) + f") * {stage.count}"
    assert isinstance(stage, OperatorNode)
    return render_drawn(stage)


def render(graph: WorkflowGraph) -> str:
    return ARROW.join(render_stage(stage) for stage in graph.stages)


class DSLSyntaxError(ValueError):
    """Malformed DSL text; the message says where and what was expected."""


_SPACE = re.compile(r"\s*")
_TOKEN = re.compile(r"(->)|([\[\](),?:*{}])|([0-9]+)|([A-Za-z_][A-Za-z0-9_]*)")
_KINDS = {1: "arrow", 2: "punct", 3: "int", 4: "name"}


@dataclass
class _Token:
    kind: str  # "arrow" | "punct" | "int" | "name" | "end"
    text: str
    pos: int


def _skip_space(text: str, pos: int) -> int:
    space = _SPACE.match(text, pos)
    return space.end() if space else pos


def _tokens(text: str) -> Iterator[_Token]:
    """Tokens in order, then one "end" token; each is matched at its position, so the whole scan is linear."""
    pos = _skip_space(text, 0)
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise DSLSyntaxError(f"unexpected character {text[pos]!r} at position {pos}")
        assert match.lastindex is not None
        yield _Token(_KINDS[match.lastindex], match.group(), pos)
        pos = _skip_space(text, match.end())
    yield _Token("end", "", len(text))


class _Parser:
    def __init__(self, text: str, max_operators: int | None) -> None:
        self._tokens = _tokens(text)
        self._current = next(self._tokens)
        self._max_operators = max_operators
        self._operators = 0

    def peek(self) -> _Token:
        return self._current

    def take(self, kind: str, text: str | None = None) -> _Token:
        token = self._current
        if token.kind != kind or (text is not None and token.text != text):
            wanted = repr(text) if text else kind
            found = excerpt(token.text) if token.kind != "end" else "end of text"
            raise DSLSyntaxError(f"expected {wanted} at position {token.pos}, found {found}")
        if token.kind != "end":
            self._current = next(self._tokens)
        return token

    def at(self, kind: str, text: str | None = None) -> bool:
        token = self._current
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
        self._count_operator(token)
        return token.text

    def _count_operator(self, token: _Token) -> None:
        self._operators += 1
        if self._max_operators is not None and self._operators > self._max_operators:
            raise DSLSyntaxError(
                f"too many operators (position {token.pos}); a workflow holds at most {self._max_operators}"
            )

    def samples(self) -> int:
        """The optional `{k}` after an operator (1 when absent)."""
        if not self.at("punct", "{"):
            return 1
        self.take("punct", "{")
        token = self.take("int")
        value = parse_bounded_int(token.text)
        if value is None:
            raise DSLSyntaxError(f"the samples count at position {token.pos} has more than {MAX_DIGITS} digits")
        self.take("punct", "}")
        return value

    def no_samples(self, where: str) -> None:
        if self.at("punct", "{"):
            raise DSLSyntaxError(
                f"samples ({{k}}) at position {self.peek().pos} are not allowed {where}; put them on an "
                "operator stage or a parallel branch"
            )

    def stage(self) -> StageBlueprint:
        if self.at("punct", "["):
            self.take("punct", "[")
            ops = [self.operator()]
            draws = [self.samples()]
            while self.at("punct", ","):
                self.take("punct", ",")
                ops.append(self.operator())
                draws.append(self.samples())
            self.take("punct", "]")
            return ParallelBlueprint(operators=ops, samples=draws if any(k != 1 for k in draws) else None)
        if self.at("punct", "("):
            self.take("punct", "(")
            ops = [self.operator()]
            self.no_samples("inside a loop")
            while self.at("arrow"):
                self.take("arrow")
                ops.append(self.operator())
                self.no_samples("inside a loop")
            self.take("punct", ")")
            self.take("punct", "*")
            token = self.take("int")
            count = parse_bounded_int(token.text)
            if count is None:
                raise DSLSyntaxError(
                    f"the loop count at position {token.pos} has more than {MAX_DIGITS} digits; "
                    "write a small number of iterations"
                )
            return LoopBlueprint(operators=ops, count=count)
        first = self.operator()
        drawn = self.samples()
        if self.at("punct", "?"):
            if drawn != 1:
                raise DSLSyntaxError("samples ({k}) are not allowed on the check of a conditional")
            self.take("punct", "?")
            on_fail = self.operator()
            self.no_samples("inside a conditional")
            self.take("punct", ":")
            token = self.take("name")
            if token.text == "done":
                return ConditionalBlueprint(check=first, on_fail=on_fail, on_pass=None)
            self._count_operator(token)
            self.no_samples("inside a conditional")
            return ConditionalBlueprint(check=first, on_fail=on_fail, on_pass=token.text)
        return OperatorBlueprint(operator=first, samples=drawn)


def parse_dsl(text: str, *, max_operators: int | None = None) -> list[StageBlueprint]:
    """Parse DSL text into stage blueprints. Operator names are checked later, against the registry;
    `max_operators` stops a huge (but well-formed) text early instead of building blueprints for all of it."""
    return _Parser(text, max_operators).workflow()
