"""The workbench fails closed: memory and store change together or not at all, limits hold under concurrency,
persistent workflows expire, and the per-workflow lock table only holds workflows in use."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from flowsteer_mcp.canvas.actions import AddStage
from flowsteer_mcp.canvas.blueprint import OperatorBlueprint
from flowsteer_mcp.canvas.execution import NoRunner
from flowsteer_mcp.canvas.options import TaskSpec
from flowsteer_mcp.canvas.session import CanvasState
from flowsteer_mcp.server import ServerSettings, build_server
from flowsteer_mcp.server.workbench import (
    Workbench,
    WorkbenchFull,
    WorkflowChange,
    WorkflowNotFound,
    WorkflowNotSaved,
)
from flowsteer_mcp.store.base import StoredWorkflow, WorkflowStore, open_store
from flowsteer_mcp.store.memory import MemoryStore
from flowsteer_mcp.store.sqlite import SQLiteStore
from operators.registry import OperatorRegistry
from tests.support.scripted_runner import ScriptedRunner
from tests.support.servers import ToolCaller

DAY_S = 86_400.0


class FakeClock:
    """A clock the test advances by hand (used both as the monotonic and as the wall clock)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RefusingStore(MemoryStore):
    """A memory store whose `put` fails while `refuse` is set (a full disk, a serialisation error...)."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = False

    async def put(self, record: StoredWorkflow) -> None:
        if self.refuse:
            raise OSError("disk full")
        await super().put(record)


def new_state(problem: str = "What is 17 * 23?") -> CanvasState:
    return CanvasState(task=TaskSpec(problem=problem))


def add(operator: str) -> AddStage:
    return AddStage(stage=OperatorBlueprint(operator=operator))


def bench_on(store: WorkflowStore, registry: OperatorRegistry, **kwargs: Any) -> Workbench:
    settings: dict[str, Any] = {"max_workflows": 10, "ttl_s": 60.0} | kwargs
    return Workbench(store, registry, NoRunner(), **settings)


async def read(bench: Workbench, workflow_id: str) -> CanvasState:
    async with bench.open(workflow_id, write=False) as canvas:
        return canvas.state.model_copy(deep=True)


# ----- memory and store change together ---------------------------------------------------------------------


async def test_a_refused_store_write_changes_nothing_and_the_workflow_stays_usable(registry: OperatorRegistry) -> None:
    store = RefusingStore()
    bench = bench_on(store, registry)
    workflow_id, _ = await bench.create(new_state())
    async with bench.open(workflow_id) as canvas:
        await canvas.edit(add("Plan"))
    before = await read(bench, workflow_id)

    store.refuse = True
    with pytest.raises(WorkflowNotSaved, match="could not be saved") as raised:
        async with bench.open(workflow_id) as canvas:
            await canvas.edit(add("Custom"))
    assert "nothing changed" in str(raised.value)
    assert await read(bench, workflow_id) == before  # the live copy did not keep the edit
    stored = await store.get(workflow_id)
    assert stored is not None and stored.state == before

    store.refuse = False
    async with bench.open(workflow_id) as canvas:
        await canvas.edit(add("Format"))
    after = await read(bench, workflow_id)
    assert after.rounds_used == before.rounds_used + 1
    assert [n.operator for n in after.graph.iter_operator_nodes()] == ["Plan", "Format"]
    stored = await store.get(workflow_id)
    assert stored is not None and stored.state == after


async def test_a_refused_create_leaves_no_workflow_behind(registry: OperatorRegistry) -> None:
    store = RefusingStore()
    store.refuse = True
    bench = bench_on(store, registry)
    with pytest.raises(WorkflowNotSaved):
        await bench.create(new_state())
    assert await bench.list() == [] and len(bench._live) == 0


async def test_a_state_sqlite_cannot_store_leaves_memory_and_database_as_before(
    tmp_path: Path, registry: OperatorRegistry
) -> None:
    """A lone surrogate that slipped past the canvas validation: the SQLite write fails, nothing changes."""
    path = tmp_path / "wf.sqlite"
    store = SQLiteStore(path)
    bench = bench_on(store, registry)
    workflow_id, _ = await bench.create(new_state())
    async with bench.open(workflow_id) as canvas:
        await canvas.edit(add("Plan"))
    before = await read(bench, workflow_id)

    with pytest.raises(WorkflowNotSaved):
        async with bench.open(workflow_id) as canvas:
            await canvas.edit(add("Custom"))
            canvas.state.last_feedback = "broken \ud800 text"  # below every validation
    assert await read(bench, workflow_id) == before
    async with bench.open(workflow_id) as canvas:  # later calls on the workflow still work
        await canvas.edit(add("Format"))
    after = await read(bench, workflow_id)
    await store.close()

    reopened = SQLiteStore(path)
    try:
        record = await reopened.get(workflow_id)
        assert record is not None and record.state == after
        assert [n.operator for n in after.graph.iter_operator_nodes()] == ["Plan", "Format"]
    finally:
        await reopened.close()


async def test_a_refused_store_write_reaches_mcp_clients_as_a_clear_tool_error(registry: OperatorRegistry) -> None:
    store = RefusingStore()
    server = build_server(ServerSettings(), registry=registry, runner=ScriptedRunner(), store=store)
    async with Client(server.mcp) as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create()
        store.refuse = True
        edit_error = await tools.error("add_operator", workflow_id=workflow_id, operator="Plan")
        create_error = await tools.error("create_workflow", task="What is 2 + 2?")
        store.refuse = False
        assert (await tools.snapshot(workflow_id))["dsl"] == ""
    assert "could not be saved" in edit_error and "nothing changed" in edit_error, edit_error
    assert "could not be saved" in create_error and "nothing was created" in create_error, create_error


async def test_a_surrogate_act_over_mcp_on_sqlite_keeps_live_and_stored_state_equal(
    tmp_path: Path, registry: OperatorRegistry
) -> None:
    """The reported case end to end: whatever `act` answers, the live and the stored workflow agree and the
    workflow keeps working."""
    path = tmp_path / "wf.sqlite"

    def server() -> Any:
        return build_server(ServerSettings(), registry=registry, runner=ScriptedRunner(), store=SQLiteStore(path))

    live = server()
    async with Client(live.mcp) as client:
        tools = ToolCaller(client)
        workflow_id = await tools.create()
        await tools.act(workflow_id, "<action>add</action><operator>Plan</operator>")  # now a prompt turn is pending
        await client.call_tool("act", {"workflow_id": workflow_id, "text": "\ud800"})
        after_surrogate = await tools.snapshot(workflow_id)
        step = await tools.act(workflow_id, "Split the product into partial products.")
        assert step["ok"] is True and step["state"]["dsl"] == "Plan"
        live_view = await tools.snapshot(workflow_id)
    await live.aclose()
    assert live_view["round"] == after_surrogate["round"] + 1

    restarted = server()
    async with Client(restarted.mcp) as client:
        assert await ToolCaller(client).snapshot(workflow_id) == live_view
    await restarted.aclose()


# ----- max_workflows under concurrency ------------------------------------------------------------------------


async def test_max_workflows_is_exact_under_concurrent_creates(
    store: WorkflowStore, registry: OperatorRegistry
) -> None:
    bench = bench_on(store, registry, max_workflows=10)
    created: list[str] = []
    refused: list[str] = []

    async def create(k: int) -> None:
        try:
            workflow_id, _ = await bench.create(new_state(f"Task {k}"))
            created.append(workflow_id)
        except WorkbenchFull:
            refused.append(f"Task {k}")

    async with anyio.create_task_group() as group:
        for k in range(20):
            group.start_soon(create, k)
    assert (len(created), len(refused)) == (10, 10)
    assert await store.count() == 10


# ----- persistent workflows expire -------------------------------------------------------------------------


async def test_persistent_workflows_unedited_past_their_ttl_are_deleted(
    persistent_store_url: str, registry: OperatorRegistry
) -> None:
    clock = FakeClock()
    store = open_store(persistent_store_url)
    bench = bench_on(store, registry, clock=clock, wall_clock=clock, persistent_ttl_s=30 * DAY_S)
    try:
        stale, _ = await bench.create(new_state("left alone"))
        edited, _ = await bench.create(new_state("edited later"))
        held, _ = await bench.create(new_state("in use during the sweep"))
        clock.advance(20 * DAY_S)
        async with bench.open(edited) as canvas:
            await canvas.edit(add("Plan"))
        clock.advance(15 * DAY_S)  # stale and held: 35 days since their last edit; edited: 15
        async with bench.open(held, write=False):
            await bench.sweep()  # a workflow in use is never deleted under its holder
        assert {r.workflow_id for r in await store.list()} == {edited, held}
        assert [r.workflow_id for r in await bench.list()] == [edited]  # list sweeps first
        with pytest.raises(WorkflowNotFound):
            await read(bench, stale)
        clock.advance(16 * DAY_S)
        assert await bench.list() == []
    finally:
        await store.close()


async def test_persistent_expiry_frees_room_and_can_be_switched_off(
    persistent_store_url: str, registry: OperatorRegistry
) -> None:
    clock = FakeClock()
    store = open_store(persistent_store_url)
    bench = bench_on(store, registry, max_workflows=1, clock=clock, wall_clock=clock, persistent_ttl_s=DAY_S)
    try:
        await bench.create(new_state())
        with pytest.raises(WorkbenchFull):
            await bench.create(new_state())
        clock.advance(DAY_S + 1)
        workflow_id, _ = await bench.create(new_state("after expiry"))
        assert [r.workflow_id for r in await store.list()] == [workflow_id]

        forever = bench_on(store, registry, clock=clock, wall_clock=clock, persistent_ttl_s=None)
        clock.advance(1000 * DAY_S)
        assert await forever.sweep() == 0
        assert [r.workflow_id for r in await forever.list()] == [workflow_id]
    finally:
        await store.close()


# ----- the lock table ------------------------------------------------------------------------------------


async def test_unknown_workflow_ids_leave_no_lock_behind(store: WorkflowStore, registry: OperatorRegistry) -> None:
    bench = bench_on(store, registry)
    for k in range(300):
        with pytest.raises(WorkflowNotFound):
            await read(bench, f"wf_unknown_{k}")
    assert len(bench._locks) == 0
    for k in range(300):
        assert await bench.delete(f"wf_unknown_{k}") is False
    assert len(bench._locks) == 0


async def test_used_deleted_and_expired_workflows_leave_no_lock_behind(
    tmp_path: Path, registry: OperatorRegistry
) -> None:
    clock = FakeClock()
    sqlite_store = SQLiteStore(tmp_path / "wf.sqlite")
    memory = bench_on(MemoryStore(), registry, clock=clock, wall_clock=clock)
    persistent = bench_on(sqlite_store, registry, clock=clock, wall_clock=clock, persistent_ttl_s=DAY_S)
    try:
        for bench in (memory, persistent):
            used, _ = await bench.create(new_state("used"))
            deleted, _ = await bench.create(new_state("deleted"))
            async with bench.open(used) as canvas:
                assert len(bench._locks) == 1
                await canvas.edit(add("Plan"))
            await read(bench, deleted)
            assert await bench.delete(deleted) is True
            assert len(bench._locks) == 0

            clock.advance(DAY_S + 61)  # past the memory TTL and the persistent one
            await bench.sweep()
            with pytest.raises(WorkflowNotFound):
                await read(bench, used)
            assert len(bench._locks) == 0 and len(bench._live) == 0
    finally:
        await sqlite_store.close()


async def test_waiters_on_one_workflow_share_one_lock_and_release_it(registry: OperatorRegistry) -> None:
    bench = bench_on(MemoryStore(), registry)
    workflow_id, _ = await bench.create(new_state())

    async def edit(operator: str) -> None:
        async with bench.open(workflow_id) as canvas:
            await anyio.sleep(0.01)
            await canvas.edit(add(operator))

    async with anyio.create_task_group() as group:
        for operator in ("Plan", "Custom", "Format"):
            group.start_soon(edit, operator)
        await anyio.sleep(0.005)
        assert len(bench._locks) == 1
    assert len(bench._locks) == 0
    assert (await read(bench, workflow_id)).rounds_used == 3


@pytest.mark.parametrize(
    ("argv", "expected"), [([], 30 * 86_400.0), (["--persistent-ttl", "60"], 60.0), (["--persistent-ttl", "0"], None)]
)
def test_the_persistent_ttl_reaches_the_workbench_from_the_command_line(
    argv: list[str], expected: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flowsteer_mcp.server as server_package
    from flowsteer_mcp import cli

    built: list[Workbench] = []
    real_build = server_package.build_server

    def capture(*args: Any, **kwargs: Any) -> Any:
        server = real_build(*args, **kwargs)
        built.append(server.bench)
        raise SystemExit(0)  # stop before serving

    monkeypatch.setattr(server_package, "build_server", capture)
    with pytest.raises(SystemExit):
        cli.mcp_main(["--no-executor", *argv])
    assert built[0].persistent_ttl_s == expected


async def test_a_reader_sees_the_last_committed_state_without_waiting_for_a_writer(registry: OperatorRegistry) -> None:
    bench = bench_on(MemoryStore(), registry)
    workflow_id, _ = await bench.create(new_state())
    writing, release = anyio.Event(), anyio.Event()

    async def slow_writer() -> None:
        async with bench.open(workflow_id) as canvas:
            await canvas.edit(add("Plan"))
            writing.set()
            await release.wait()  # a step that runs its workflow for minutes

    async with anyio.create_task_group() as group:
        group.start_soon(slow_writer)
        await writing.wait()
        with anyio.fail_after(2):
            seen = await read(bench, workflow_id)
        assert seen.graph.is_empty and seen.rounds_used == 0, "the writer's step is not committed yet"
        release.set()
    assert (await read(bench, workflow_id)).rounds_used == 1


async def test_listeners_hear_each_committed_change_once(registry: OperatorRegistry) -> None:
    store = RefusingStore()
    bench = bench_on(store, registry)
    heard: list[tuple[str, str]] = []

    async def listener(change: WorkflowChange) -> None:
        heard.append((change.kind, change.workflow_id))

    bench.add_listener(listener)
    workflow_id, _ = await bench.create(new_state())
    async with bench.open(workflow_id) as canvas:
        await canvas.edit(add("Plan"))
    async with bench.open(workflow_id, write=False):
        pass
    store.refuse = True
    with pytest.raises(WorkflowNotSaved):
        async with bench.open(workflow_id) as canvas:
            await canvas.edit(add("Custom"))
    store.refuse = False
    assert await bench.delete(workflow_id)
    assert heard == [("created", workflow_id), ("updated", workflow_id), ("deleted", workflow_id)]


# ----- a fleet of workbenches on one shared store (PostgreSQL) -------------------------------------------------


@pytest.fixture
async def fleet(postgres_dsn: str, registry: OperatorRegistry) -> AsyncIterator[list[Workbench]]:
    """Three workbenches, each on its own store and connection pool over one database: three servers."""
    stores = [open_store(postgres_dsn) for _ in range(3)]
    try:
        yield [bench_on(store, registry, max_workflows=10) for store in stores]
    finally:
        for store in stores:
            await store.close()


@pytest.mark.slow
async def test_a_fleet_serves_any_workflow_from_any_server_and_never_a_stale_copy(fleet: list[Workbench]) -> None:
    a, b, c = fleet
    workflow_id, _ = await a.create(new_state())
    assert (await read(a, workflow_id)).rounds_used == 0  # A has read it: a private store would now cache it
    async with b.open(workflow_id) as canvas:
        await canvas.edit(add("Plan"))
    async with c.open(workflow_id) as canvas:
        await canvas.edit(add("Custom"))
    for bench in fleet:
        state = await read(bench, workflow_id)
        assert [n.operator for n in state.graph.iter_operator_nodes()] == ["Plan", "Custom"]
        assert state.rounds_used == 2 and len(state.history) == 2
    assert await a.delete(workflow_id) is True
    with pytest.raises(WorkflowNotFound):
        await read(b, workflow_id)
    assert all(len(bench._live) == 0 for bench in fleet)  # a shared store is never cached


@pytest.mark.slow
async def test_concurrent_steps_on_one_workflow_from_several_servers_are_serialised(fleet: list[Workbench]) -> None:
    workflow_id, _ = await fleet[0].create(new_state())
    inside: list[str] = []
    overlaps: list[str] = []

    async def step(bench: Workbench, operator: str) -> None:
        async with bench.open(workflow_id) as canvas:
            if inside:
                overlaps.append(f"{operator} ran while {inside} did")
            inside.append(operator)
            await anyio.sleep(0.05)  # a step takes time between its load and its commit
            await canvas.edit(add(operator))
            inside.remove(operator)

    operators = ["Plan", "Custom", "Format", "Programmer", "Review", "Revise"]
    async with anyio.create_task_group() as group:
        for k, operator in enumerate(operators):
            group.start_soon(step, fleet[k % 3], operator)
    assert overlaps == []
    state = await read(fleet[1], workflow_id)
    assert sorted(n.operator for n in state.graph.iter_operator_nodes()) == sorted(operators)  # no lost update
    assert state.rounds_used == len(operators) and len(state.history) == len(operators)


@pytest.mark.slow
async def test_max_workflows_is_exact_across_a_fleet(fleet: list[Workbench]) -> None:
    outcomes: list[bool] = []

    async def create(bench: Workbench, k: int) -> None:
        try:
            await bench.create(new_state(f"Task {k}"))
            outcomes.append(True)
        except WorkbenchFull:
            outcomes.append(False)

    async with anyio.create_task_group() as group:
        for k in range(18):
            group.start_soon(create, fleet[k % 3], k)
    assert (outcomes.count(True), outcomes.count(False)) == (10, 8)
    assert await fleet[2].store.count() == 10


@pytest.mark.slow
async def test_expiry_spares_a_workflow_another_server_edited_after_the_stale_list(
    postgres_dsn: str, registry: OperatorRegistry
) -> None:
    clock = FakeClock()
    stores = [open_store(postgres_dsn) for _ in range(2)]
    sweeper, editor = (bench_on(s, registry, clock=clock, wall_clock=clock, persistent_ttl_s=DAY_S) for s in stores)
    try:
        workflow_id, _ = await editor.create(new_state())
        clock.advance(DAY_S + 1)
        cutoff = clock() - DAY_S
        assert await stores[0].stale(cutoff) == [workflow_id]  # the sweeper's list ...
        async with editor.open(workflow_id) as canvas:  # ... then the other server edits it
            await canvas.edit(add("Plan"))
        assert await sweeper._delete_unedited(workflow_id, cutoff) is False
        assert (await read(sweeper, workflow_id)).rounds_used == 1
    finally:
        for store in stores:
            await store.close()
