"""A throwaway PostgreSQL cluster for tests: Debian's binaries, a temp data directory, loopback.

``with postgres_cluster() as dsn:`` runs ``initdb`` and ``pg_ctl start -w`` (which returns once
the server accepts connections) on 127.0.0.1 and a free port, and removes everything afterwards.
As root the cluster runs as the ``postgres`` system user, since ``initdb`` refuses root.
Raises ``PostgresUnavailable`` when no PostgreSQL binaries are installed
(``apt-get install -y postgresql``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.netns import free_port

__all__ = ["PostgresUnavailable", "find_bindir", "postgres_cluster"]


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def find_bindir() -> Path | None:
    found = []
    for candidate in Path("/usr/lib/postgresql").glob("*/bin"):
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            version = candidate.parent.name
            found.append((int(version) if version.isdigit() else 0, candidate))
    if found:
        return max(found)[1]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _real_root() -> bool:
    """Root of the whole system, not the one user a namespace maps to 0 (``unshare -r``)."""
    try:
        first = Path("/proc/self/uid_map").read_text().split()
    except OSError:
        return True
    return first[:3] == ["0", "0", "4294967295"]


@contextmanager
def postgres_cluster(*, timeout_s: float = 60.0) -> Iterator[str]:
    """Yield a DSN ``postgresql://postgres@127.0.0.1:PORT/postgres`` (trust auth)."""
    bindir = find_bindir()
    if bindir is None:
        raise PostgresUnavailable("PostgreSQL binaries not found (apt-get install postgresql)")
    prefix: list[str] = []
    if os.geteuid() == 0 and not _real_root():
        raise PostgresUnavailable(
            "root only inside a user namespace (unshare -r): initdb refuses root and the "
            "postgres user does not exist here; run the tests as yourself "
            "(scripts/in-private-netns.sh does, with util-linux 2.38 or later) or as root")
    root = Path(tempfile.mkdtemp(prefix="vs-pg-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, log = root / "data", root / "server.log"
    port = free_port()

    def run(*cmd: str) -> None:
        try:
            subprocess.run([*prefix, *cmd], check=True, timeout=timeout_s, cwd=root,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except subprocess.CalledProcessError as exc:
            detail = exc.stderr.decode(errors="replace") if exc.stderr else ""
            if log.exists():
                detail += log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"PostgreSQL test cluster: {Path(cmd[0]).name} failed: "
                               f"{detail}") from exc

    try:
        run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
            "-E", "UTF8", "--locale=C", "--no-sync")
        options = (f"-p {port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off")
        run(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log),
            "-w", "-t", str(int(timeout_s)), "start")
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)
