"""Append-only journal of graded episodes, so a long evaluation survives a kill and can be resumed.

The first line records what the results depend on (executor and engine settings, canvas server, policy,
seed, the workflow files' digests); every further line is one `ItemResult`, written and flushed the moment its
episode is graded. A kill can at worst leave a truncated last line, which resuming drops (that episode simply
runs again). Resuming under a different executor, engine settings or policy, or with a workflow file that
changed, is refused: mixing two setups' results in one table would be a silent lie. A workflow file may be
added on resume, like a director: the header then records its digest beside the earlier ones, and keeps the
digest of a file a resumed run leaves out, so that file cannot come back changed later. The policy settings
describe only the `policy` director's items, so a journal holding none may take a policy on resume (the
baselines of a long evaluation can run while the policy is still training); from then on it is held to it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from flowsteer_mcp.director.graded import ItemResult
from training.errors import TrainingError
from training.evaluate.policy_play import recorded_identity
from training.evaluate.results import EvalConfig

JOURNAL_NAME = "items.jsonl"
POLICY_DIRECTOR = "policy"
JOURNAL_FORMAT = 1
# The config fields an item's result depends on; the others (concurrency, limit, skip, data paths) only choose
# which items run, so they may change between a run and its resumption. Likewise the URLs (`mcp_urls`,
# `policy_urls`, `executor_urls`) only choose where an item runs: `mcp_url` and `policy_url` are compared by
# what they locate (`_LOCATORS`: an in-process server or a remote one; a served policy, the shipped director or
# none), not by address, so a resumed run may use other servers or replicas. What a remote policy is, is
# compared by `policy_model` and `policy_weights`; a remote MCP server's executor is not known to the journal
# (it never was: the same URL may serve another executor after a restart).
IDENTITY_FIELDS = (
    "executor",
    "engine",
    "mcp_url",
    "policy_url",
    "policy_model",
    "policy_weights",
    "policy_play",
    "seed",
    "replay",
    "workflow_digests",
)
# Older journals lack a field recorded since; a missing one reads as this default, or, where no default can
# be known (`_NOT_RECORDED`: journals written before the engine settings were), is not compared.
# Within `policy_play`, a field added since reads as PolicyPlay's default (`recorded_identity`).
_NOT_RECORDED = object()
_REMOTE = "<remote>"


def _located(value: Any) -> Any:
    """What a recorded `mcp_url`/`policy_url` locates: None (in process / no policy), `shipped:NAME`, or a remote
    server of any address."""
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return _REMOTE
    return value


_LOCATORS = ("mcp_url", "policy_url")
# The fields that say which policy played; nothing but the `policy` director's items depends on them.
_POLICY_FIELDS = ("policy_url", "policy_model", "policy_weights", "policy_play")
_IDENTITY_DEFAULTS: dict[str, Any] = {
    "workflow_digests": {},
    "engine": _NOT_RECORDED,
    "policy_play": None,
    "policy_weights": _NOT_RECORDED,
}

# None here means "could not be asked" (the policy server was down when the run started), not a value.
_COMPARED_WHEN_KNOWN = ("policy_weights",)

ItemKey = tuple[str, str, str]  # (director, source, problem_id)


class JournalError(TrainingError, ValueError):
    """A journal that cannot be created or resumed; the message says which file and what to do."""


def item_key(item: ItemResult) -> ItemKey:
    return (item.director, item.source, item.problem_id)


def _header(config: EvalConfig) -> dict[str, Any]:
    return {"journal": JOURNAL_FORMAT, "config": config.model_dump(mode="json")}


def _digest_mismatches(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """Workflow files both runs name whose contents differ; a file only one of them names is no mismatch."""
    return [
        f"workflow_digests: {name} is not the file the journal's run used (journal {recorded[name][:12]}, "
        f"this run {current[name][:12]})"
        for name in sorted(recorded.keys() & current.keys())
        if recorded[name] != current[name]
    ]


def _identity_mismatches(recorded: dict[str, Any], config: EvalConfig, *, policy_played: bool) -> list[str]:
    """What differs between the journal's recorded settings and this run's; the policy's only if it has played."""
    digests = _digest_mismatches(recorded.get("workflow_digests") or {}, config.workflow_digests)
    current = config.model_dump(mode="json")
    journal = {name: recorded.get(name, _IDENTITY_DEFAULTS.get(name)) for name in IDENTITY_FIELDS}
    if isinstance(journal["policy_play"], dict):
        journal["policy_play"] = recorded_identity(journal["policy_play"])
    current = {**current, **{name: _located(current[name]) for name in _LOCATORS}}
    journal.update({name: _located(journal[name]) for name in _LOCATORS})
    for name in _COMPARED_WHEN_KNOWN:
        if journal[name] is None or current[name] is None:
            journal[name] = _NOT_RECORDED
    if not policy_played:
        journal.update(dict.fromkeys(_POLICY_FIELDS, _NOT_RECORDED))
    return digests + [
        f"{name}: journal {journal[name]!r}, this run {current[name]!r}"
        for name in IDENTITY_FIELDS
        if name != "workflow_digests" and journal[name] is not _NOT_RECORDED and journal[name] != current[name]
    ]


def _header_of(path: Path, lines: list[str]) -> dict[str, Any]:
    if not lines:
        raise JournalError(f"{path} is empty; delete it or choose another --out")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError as error:
        raise JournalError(f"{path}:1: not a journal header ({error.msg}); choose another --out") from None
    if not isinstance(header, dict) or header.get("journal") != JOURNAL_FORMAT:
        raise JournalError(f"{path}:1: not a format-{JOURNAL_FORMAT} evaluation journal; choose another --out")
    return header


def _items_of(path: Path, lines: list[str]) -> list[ItemResult]:
    """The items after the header, the last one per key winning (a failed episode run again by --resume)."""
    items: dict[ItemKey, ItemResult] = {}
    for number, line in enumerate(lines[1:], start=2):
        try:
            item = ItemResult.model_validate_json(line)
        except ValidationError as error:
            if number == len(lines):  # a kill mid-write: that episode just runs again
                break
            raise JournalError(f"{path}:{number}: not an item record ({error.errors()[0]['msg']})") from None
        items[item_key(item)] = item
    return list(items.values())


def is_journal(path: Path) -> bool:
    """Whether the file at `path` starts with an evaluation journal's header."""
    with path.open(encoding="utf-8") as handle:
        first = handle.readline()
    try:
        header = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(header, dict) and header.get("journal") == JOURNAL_FORMAT


def read_journal_items(path: Path) -> list[ItemResult]:
    """A journal's graded items, read as a resume reads them, for readers other than a resumed run (screens)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    _header_of(path, lines)
    return _items_of(path, lines)


def _read(path: Path, config: EvalConfig) -> tuple[dict[str, str], list[ItemResult]]:
    """The journal's workflow digests and items, after checking the header matches `config`."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = _header_of(path, lines)
    items = _items_of(path, lines)
    policy_played = any(item.director == POLICY_DIRECTOR for item in items)
    mismatches = _identity_mismatches(header.get("config") or {}, config, policy_played=policy_played)
    if mismatches:
        raise JournalError(
            f"{path} was written by a run with other settings ({'; '.join(mismatches)}); "
            "resume with the same settings or choose another --out"
        )
    recorded_digests = (header.get("config") or {}).get("workflow_digests") or {}
    return dict(recorded_digests), items


class ItemJournal:
    """The open journal of one evaluation folder; `append` makes an item durable before returning."""

    def __init__(self, path: Path, handle: IO[str]) -> None:
        self.path = path
        self._handle = handle

    @classmethod
    def open(cls, folder: str | Path, config: EvalConfig, *, resume: bool) -> tuple[ItemJournal, list[ItemResult]]:
        """Start a new journal in `folder`, or (`resume`) continue the one there; returns it and its items.

        Resuming rewrites the file first (header of this run plus the intact items), so a truncated line
        from a kill never ends up in the middle of the journal.
        """
        path = Path(folder) / JOURNAL_NAME
        if resume and not path.exists():
            raise JournalError(f"nothing to resume: {path} does not exist (drop --resume to start a new run)")
        if not resume and path.exists():
            raise JournalError(f"{path} already exists: pass --resume to continue that run, or choose another --out")
        recorded_digests, items = _read(path, config) if resume else ({}, [])
        kept = config.model_copy(update={"workflow_digests": {**recorded_digests, **config.workflow_digests}})
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(".jsonl.tmp")
        lines = [json.dumps(_header(kept)), *(item.model_dump_json() for item in items)]
        staging.write_text("\n".join(lines) + "\n", encoding="utf-8")
        os.replace(staging, path)
        return cls(path, path.open("a", encoding="utf-8")), items

    def append(self, item: ItemResult) -> None:
        self._handle.write(item.model_dump_json() + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()
