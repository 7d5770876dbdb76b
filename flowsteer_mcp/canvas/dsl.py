"""The workflow DSL: `Plan -> [Programmer, Custom] -> ScEnsemble -> Verify ? Revise : done -> Format`.

    workflow  := "" | stage { " -> " stage }
    stage     := OP [ "{" INT [ "|" RULE ] "}" ] | "[" DRAWN { ", " DRAWN } "]"
               | OP " ? " OP " : " ( OP | "done" ) | "(" OP { " -> " OP } ") * " INT | OP " ?? " OP
    DRAWN     := OP [ "{" INT "}" ]
    RULE      := "tests" | "vote"

Each stage kind (`canvas/kinds/`) renders and parses its own form: a kind either opens with its punctuation
(`[`, `(`) or follows a first operator with an infix (`?`, `??`); the parser here only dispatches on that.

`Programmer{3}` is a node with `samples: 3` (three draws whose answers become candidates for the next stage,
e.g. `Programmer{3} -> ScEnsemble`); one draw renders without braces. Samples exist only on an operator stage
and on parallel branches, so braces anywhere else are a syntax error. `Programmer{8|tests}` draws in waves and
stops early by a stopping rule (`operators/stopping.py`), on an operator stage only. `render` is canonical; `parse_dsl` accepts any spacing and returns stage blueprints without ids (prompts do
not live in the DSL; the JSON export carries them). `render(build(parse_dsl(text)))` reproduces canonical text.

Parsing is linear and lazy: tokens are matched in place (never by copying the rest of the text) and pulled
one at a time, so junk fails at its first bad token; loop counts are digit-capped before `int()`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from flowsteer_mcp.canvas.blueprint import OperatorBlueprint, StageBlueprint
from flowsteer_mcp.canvas.kinds import Stage, kind_of, kinds, registry_version
from flowsteer_mcp.canvas.kinds.base import AnyKind, DSLSyntaxError
from flowsteer_mcp.canvas.kinds.operator import render_drawn
from flowsteer_mcp.canvas.model import WorkflowGraph
from flowsteer_mcp.canvas.numbers import MAX_DIGITS, parse_bounded_int
from flowsteer_mcp.canvas.text import excerpt
from operators.stopping import STOP_RULES, StopRuleName

ARROW = " -> "


def render_stage(stage: Stage) -> str:
    return kind_of(stage).render_dsl(stage)


def render(graph: WorkflowGraph) -> str:
    return ARROW.join(render_stage(stage) for stage in graph.stages)


_SPACE = re.compile(r"\s*")
_KINDS = {1: "arrow", 2: "punct", 3: "int", 4: "name"}


@dataclass(frozen=True)
class _Grammar:
    """What the registered kinds add to the DSL: their punctuation, opening and infix markers."""

    token: re.Pattern[str]
    openers: dict[str, AnyKind]
    infixes: dict[str, AnyKind]


def _grammar() -> _Grammar:
    """The grammar of the kinds registered now."""
    return _grammar_at(registry_version())


@lru_cache(maxsize=4)
def _grammar_at(version: int) -> _Grammar:
    """The grammar of the registry at `version` (the cache key: registering a kind changes it)."""
    del version
    registered = kinds()
    punctuation = sorted({"{", "}", "|", *(t for kind in registered for t in kind.dsl_tokens)}, key=len, reverse=True)
    token = re.compile(r"(->)|(" + "|".join(re.escape(p) for p in punctuation) + r")|([0-9]+)|([A-Za-z_][A-Za-z0-9_]*)")
    return _Grammar(
        token=token,
        openers={kind.dsl_opener: kind for kind in registered if kind.dsl_opener},
        infixes={kind.dsl_infix: kind for kind in registered if kind.dsl_infix},
    )


@dataclass
class _Token:
    kind: str  # "arrow" | "punct" | "int" | "name" | "end"
    text: str
    pos: int


def _skip_space(text: str, pos: int) -> int:
    space = _SPACE.match(text, pos)
    return space.end() if space else pos


def _tokens(text: str, pattern: re.Pattern[str]) -> Iterator[_Token]:
    """Tokens in order, then one "end" token; each is matched at its position, so the whole scan is linear."""
    pos = _skip_space(text, 0)
    while pos < len(text):
        match = pattern.match(text, pos)
        if match is None:
            raise DSLSyntaxError(f"unexpected character {text[pos]!r} at position {pos}")
        assert match.lastindex is not None
        yield _Token(_KINDS[match.lastindex], match.group(), pos)
        pos = _skip_space(text, match.end())
    yield _Token("end", "", len(text))


class _Parser:
    """The recursive-descent parser; it is the `DslReader` each kind's parse hook reads its stage with."""

    def __init__(self, text: str, max_operators: int | None) -> None:
        self._grammar = _grammar()
        self._tokens = _tokens(text, self._grammar.token)
        self._current = next(self._tokens)
        self._max_operators = max_operators
        self._operators = 0

    def _take(self, kind: str, text: str | None = None) -> _Token:
        token = self._current
        if token.kind != kind or (text is not None and token.text != text):
            wanted = repr(text) if text else kind
            found = excerpt(token.text) if token.kind != "end" else "end of text"
            raise DSLSyntaxError(f"expected {wanted} at position {token.pos}, found {found}")
        if token.kind != "end":
            self._current = next(self._tokens)
        return token

    def _at(self, kind: str, text: str | None = None) -> bool:
        token = self._current
        return token.kind == kind and (text is None or token.text == text)

    def at(self, text: str) -> bool:
        """Whether the next token is the punctuation (or arrow) `text`."""
        return self._at("arrow" if text == "->" else "punct", text)

    def expect(self, text: str) -> None:
        self._take("arrow" if text == "->" else "punct", text)

    def workflow(self) -> list[StageBlueprint]:
        if self._at("end"):
            return []
        stages = [self.stage()]
        while self._at("arrow"):
            self._take("arrow")
            stages.append(self.stage())
        self._take("end")
        return stages

    def operator(self) -> str:
        token = self._take("name")
        if token.text == "done":
            raise DSLSyntaxError(f"'done' is only allowed as the pass branch of a conditional (position {token.pos})")
        self._count_operator(token)
        return token.text

    def operator_or_done(self) -> str | None:
        """An operator name, or None for `done`."""
        token = self._take("name")
        if token.text == "done":
            return None
        self._count_operator(token)
        return token.text

    def _count_operator(self, token: _Token) -> None:
        self._operators += 1
        if self._max_operators is not None and self._operators > self._max_operators:
            raise DSLSyntaxError(
                f"too many operators (position {token.pos}); a workflow holds at most {self._max_operators}"
            )

    def bounded_int(self, label: str, advice: str = "") -> int:
        """An integer of at most MAX_DIGITS digits (checked before `int()`)."""
        token = self._take("int")
        value = parse_bounded_int(token.text)
        if value is None:
            raise DSLSyntaxError(f"{label} at position {token.pos} has more than {MAX_DIGITS} digits{advice}")
        return value

    def samples(self) -> int:
        """The optional `{k}` after an operator (1 when absent); a stopping rule is refused here."""
        value, rule = self.drawn()
        if rule is not None:
            raise DSLSyntaxError(
                f"a stopping rule ({{k|{rule}}}) is only allowed on an operator stage, not inside a structure"
            )
        return value

    def drawn(self) -> tuple[int, StopRuleName | None]:
        """The optional `{k}` or `{k|rule}` after an operator: draws, and the rule that may stop them early."""
        if not self.at("{"):
            return 1, None
        self.expect("{")
        value = self.bounded_int("the samples count")
        rule: StopRuleName | None = None
        if self.at("|"):
            self.expect("|")
            name = self._take("name")
            if name.text not in STOP_RULES:
                raise DSLSyntaxError(
                    f"unknown stopping rule {name.text[:20]!r} at position {name.pos}; use {', '.join(STOP_RULES)}"
                )
            rule = STOP_RULES[name.text].name
        self.expect("}")
        return value, rule

    def no_samples(self, where: str) -> None:
        if self.at("{"):
            raise DSLSyntaxError(
                f"samples ({{k}}) at position {self._current.pos} are not allowed {where}; put them on an "
                "operator stage or a parallel branch"
            )

    def stage(self) -> StageBlueprint:
        for opener, kind in self._grammar.openers.items():
            if self.at(opener):
                self.expect(opener)
                opened: StageBlueprint = kind.parse_dsl_prefix(self)
                return opened
        first = self.operator()
        drawn, rule = self.drawn()
        for infix, kind in self._grammar.infixes.items():
            if self.at(infix):
                if rule is not None:
                    raise DSLSyntaxError(f"a stopping rule ({{k|{rule}}}) is only allowed on an operator stage")
                self.expect(infix)
                joined: StageBlueprint = kind.parse_dsl_infix(self, first, drawn)
                return joined
        return OperatorBlueprint(operator=first, samples=drawn, until=rule)


def parse_dsl(text: str, *, max_operators: int | None = None) -> list[StageBlueprint]:
    """Parse DSL text into stage blueprints. Operator names are checked later, against the registry;
    `max_operators` stops a huge (but well-formed) text early instead of building blueprints for all of it."""
    return _Parser(text, max_operators).workflow()


__all__ = ["ARROW", "DSLSyntaxError", "parse_dsl", "render", "render_drawn", "render_stage"]
