"""A real, throwaway PostgreSQL server for the tests of the PostgreSQL workflow store (a pytest plugin).

`postgres_server` (session scope) runs Debian's PostgreSQL binaries: `initdb` into a temporary folder, `pg_ctl
start` on a free loopback port with the unix socket in that folder, `pg_isready` until it answers, and `pg_ctl
stop -m immediate` on the data folder it created (so only the postmaster this session started is stopped). The
server requires a password over TCP (scram-sha-256), so the tests also check that no password is ever logged.
`postgres_dsn` gives each test its own fresh database on it.

initdb refuses to run as root, so under root the server runs as the unprivileged `nobody` (the temporary folder
is handed to it); any other user runs it as itself. Without the binaries (or without psycopg) the PostgreSQL
tests skip and say why, unless `FLOWSTEER_REQUIRE_POSTGRES=1` declares that the set-up promised them (as
`make test` does after `make postgres-deps` installed the `postgresql` package): then their absence fails.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import free_port

REQUIRE_POSTGRES = os.environ.get("FLOWSTEER_REQUIRE_POSTGRES") == "1"
READY_TIMEOUT_S = 60.0
SUPERUSER = "flowsteer"
UNPRIVILEGED = "nobody"


def postgres_bin_dir() -> Path | None:
    """The newest `/usr/lib/postgresql/<major>/bin` with initdb (Debian's layout), or `$FLOWSTEER_POSTGRES_BIN`."""
    if explicit := os.environ.get("FLOWSTEER_POSTGRES_BIN"):
        return Path(explicit) if (Path(explicit) / "initdb").exists() else None
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0) if found else None


def missing_postgres_reason() -> str | None:
    """Why the PostgreSQL tests cannot run here, or None when they can."""
    if importlib.util.find_spec("psycopg") is None or importlib.util.find_spec("psycopg_pool") is None:
        return "psycopg is missing (pip install -e '.[postgres]')"
    if postgres_bin_dir() is None:
        return "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin (run `make postgres-deps`)"
    return None


@dataclass
class PostgresServer:
    """One running postmaster: connect as `SUPERUSER` with `password` on 127.0.0.1:`port`."""

    bin_dir: Path
    root: Path  # the temporary folder: data/ and the unix socket
    port: int
    password: str
    run_as: str | None  # the user the server runs as (None: this process's own user)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        user: dict[str, Any] = {}
        if self.run_as is not None:
            entry = pwd.getpwnam(self.run_as)
            user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        return subprocess.run(
            [str(self.bin_dir / tool), *args],
            cwd=self.root,
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "TZ": "UTC"},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **user,
        )

    def _check(self, finished: subprocess.CompletedProcess[str]) -> None:
        if finished.returncode != 0:
            raise RuntimeError(
                f"{finished.args[0]} failed ({finished.returncode}):\n{finished.stdout}{finished.stderr}"
            )

    def start(self) -> None:
        password_file = self.root / "pwfile"
        password_file.write_text(self.password + "\n")
        if self.run_as is not None:
            entry = pwd.getpwnam(self.run_as)
            for path in (self.root, password_file):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._check(
            self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                f"--pwfile={password_file}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--no-sync",
                timeout=120.0,
            )
        )
        password_file.unlink()
        # fsync off: a test never crashes the machine, only the flowsteer servers (the postmaster stays up).
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._check(
            self._run("pg_ctl", "start", "-D", str(self.data_dir), "-l", str(self.root / "log"), "-w", "-o", options)
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while self._run("pg_isready", "-h", "127.0.0.1", "-p", str(self.port), "-t", "2").returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not answer within {READY_TIMEOUT_S}s:\n{self.log()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Immediate shutdown of the postmaster of our own data folder (pg_ctl signals the PID it recorded)."""
        if (self.data_dir / "postmaster.pid").exists():
            self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "immediate", "-w")

    def log(self) -> str:
        path = self.root / "log"
        return path.read_text(errors="replace") if path.exists() else ""

    def create_database(self) -> str:
        """A fresh, empty database; returns its DSN."""
        import psycopg

        name = "t_" + secrets.token_hex(6)
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    reason = missing_postgres_reason()
    if reason is not None:
        if REQUIRE_POSTGRES:
            pytest.fail(f"FLOWSTEER_REQUIRE_POSTGRES=1 but {reason}")
        pytest.skip(reason)
    bin_dir = postgres_bin_dir()
    assert bin_dir is not None
    run_as = UNPRIVILEGED if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="flowsteer-pg-"))
    server = PostgresServer(bin_dir, root, free_port(), secrets.token_hex(12), run_as)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """The DSN (with its password) of a fresh database of the session's server."""
    return postgres_server.create_database()
