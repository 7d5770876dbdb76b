"""Static specs of the built-in operators (12 advertised, 1 peer), in our own words.

Unadvertised (`legacy=True`): CodeT, a published selection method kept as a peer to compare ours with (the
`codet8` library workflow), not a step for policies to use.
"""

from __future__ import annotations

from operators.base import Category, CostClass, OperatorSpec, Role

_SPECS = [
    OperatorSpec(
        name="Plan",
        reply_tokens=256,
        category=Category.PLANNING,
        role=Role.GUIDANCE,
        summary="Writes a short step-by-step plan for the problem; later solvers receive it as guidance.",
        when_to_use="At the start of multi-step problems. A plan is not an answer: add a solver after it.",
        signature="Plan(problem) -> {text, steps[]}",
    ),
    OperatorSpec(
        name="Decompose",
        reply_tokens=320,
        category=Category.PLANNING,
        role=Role.GUIDANCE,
        summary="Splits the problem into independent sub-problems that later solvers can address.",
        when_to_use="When the problem has separable parts; follow with parallel solvers and Aggregate.",
        signature="Decompose(problem) -> {text, subproblems[]}",
    ),
    OperatorSpec(
        name="Custom",
        reply_tokens=512,
        category=Category.SOLVING,
        role=Role.SOLUTION,
        summary="Answers with the executor LLM following your instruction (the most flexible solver).",
        when_to_use="General reasoning, QA and math in words; any step that needs a tailored instruction.",
        signature="Custom(input, instruction) -> {text}",
        solver=True,
        hinted_for=("qa", "general"),
    ),
    OperatorSpec(
        name="AnswerGenerate",
        reply_tokens=512,
        category=Category.SOLVING,
        role=Role.SOLUTION,
        summary="Thinks step by step, then states a final answer separately from its reasoning.",
        when_to_use="Questions with a short definite answer (numbers, names, choices).",
        signature="AnswerGenerate(input) -> {text=answer, thought}",
        solver=True,
    ),
    OperatorSpec(
        name="Programmer",
        reply_tokens=768,
        category=Category.SOLVING,
        role=Role.SOLUTION,
        summary="Writes Python and runs it in the sandbox; math: a solve() whose return value is the answer; "
        "code tasks: the requested function.",
        when_to_use="Arithmetic, counting, exact computation, and every code task.",
        signature="Programmer(problem, analysis?) -> {text=output or code, code, exec}",
        cost=CostClass.HEAVY,
        solver=True,
        runs_programs=True,
        hinted_for=("math", "code"),
    ),
    OperatorSpec(
        name="Test",
        reply_tokens=768,
        category=Category.VERIFICATION,
        role=Role.CHECKER,
        summary="Runs the current code against the task's public tests in the sandbox and repairs it on failure.",
        when_to_use="Code tasks, right after Programmer.",
        signature="Test(problem, code, entry_point, public_tests) -> {text=code, passed, exec, attempts}",
        cost=CostClass.HEAVY,
        runs_tests=True,
        hinted_for=("code",),
    ),
    OperatorSpec(
        name="Review",
        reply_tokens=384,
        category=Category.VERIFICATION,
        role=Role.CHECKER,
        summary="Critiques the current solution and returns a pass/fail verdict with concrete feedback.",
        when_to_use="Free-text or reasoning answers; pair with Revise.",
        signature="Review(problem, solution) -> {text=solution, passed, feedback}",
        hinted_for=("qa", "general"),
    ),
    OperatorSpec(
        name="Verify",
        reply_tokens=512,
        category=Category.VERIFICATION,
        role=Role.CHECKER,
        summary="Solves the problem independently and checks the current answer against it (verdict + confidence).",
        when_to_use="Math and factual answers; the usual guard before Revise or Format.",
        signature="Verify(problem, answer) -> {text, passed, confidence, independent_answer}",
        hinted_for=("math",),
    ),
    OperatorSpec(
        name="Revise",
        reply_tokens=512,
        category=Category.REVISION,
        role=Role.SOLUTION,
        summary=(
            "Rewrites the current solution using the last checker feedback; keeps its input unless the revision "
            "is better by evidence (code: passes more public tests)."
        ),
        when_to_use="After a checker, typically as the branch taken when the check fails.",
        signature="Revise(problem, solution, feedback, public_tests?) -> {text, kept_input, note}",
        solver=True,
    ),
    OperatorSpec(
        name="ScEnsemble",
        reply_tokens=160,
        category=Category.ENSEMBLE,
        role=Role.SOLUTION,
        summary="Picks the most consistent candidate of a parallel stage. Code: runs every program on the "
        "public tests in the sandbox and picks from the largest behaviour group among those passing the most "
        "(may ask for a few extra test inputs); other tasks: vote on normalised answers. The LLM only breaks "
        "ties that execution or the vote cannot settle.",
        when_to_use="Right after a parallel stage of solvers, or a solver node with `samples: k`.",
        signature="ScEnsemble(problem, candidates) -> {text, index, votes}",
        needs_candidates=True,
        hinted_for=("math", "code"),
    ),
    OperatorSpec(
        name="Aggregate",
        reply_tokens=384,
        category=Category.ENSEMBLE,
        role=Role.SOLUTION,
        summary="Combines the candidates of a parallel stage (or sub-problem answers) into one answer.",
        when_to_use="After Decompose + parallel solvers, or to merge complementary candidates.",
        signature="Aggregate(problem, candidates) -> {text, reason}",
        needs_candidates=True,
        solver=True,
        hinted_for=("qa", "general"),
    ),
    OperatorSpec(
        name="Format",
        reply_tokens=96,
        category=Category.FORMATTING,
        role=Role.SOLUTION,
        summary="Extracts the short final answer span from the current solution, nothing else.",
        when_to_use="As the last stage whenever the solution is verbose.",
        signature="Format(problem, solution) -> {text}",
    ),
    OperatorSpec(
        name="CodeT",
        reply_tokens=384,
        category=Category.ENSEMBLE,
        role=Role.SOLUTION,
        summary="Code only, a peer for comparison (CodeT, Chen et al. 2022): the executor writes up to 8 "
        "assertions with expected outputs; among the candidates passing the most public tests, those passing "
        "exactly the same generated tests form a set scored by its candidates times its tests, and the "
        "best set's earliest candidate wins.",
        when_to_use="Comparison runs only (library workflow `codet8`), after a sampled Programmer; prefer ScEnsemble.",
        signature="CodeT(problem, candidates, entry_point, public_tests) -> {text, code, index, votes, scores, tests}",
        needs_candidates=True,
        legacy=True,  # not advertised: a peer to measure against, not one of our steps
        cost=CostClass.HEAVY,
    ),
]

BUILTIN_SPECS: dict[str, OperatorSpec] = {spec.name: spec for spec in _SPECS}
