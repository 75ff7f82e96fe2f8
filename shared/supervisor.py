"""`regs up`: embedded servers when no URLs are configured, first-start ingest, and the five processes
as supervised children (restart with backoff, one log file each, clean stop on Ctrl-C / `regs down`)."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from shared.config import Settings
from shared.embedded import EmbeddedPostgres, EmbeddedRedis, embedded_servers

SERVICES = ("ingest", "retriever", "generator", "scorer", "gateway")
STATE_FILE = "state.json"


@dataclass
class Child:
    name: str
    log_path: Path
    process: subprocess.Popen | None = None
    restarts: int = 0
    started_at: float = 0.0
    backoff: float = 1.0
    next_start: float = 0.0
    last_exit: int | None = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class Stack:
    settings: Settings
    data_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    children: dict[str, Child] = field(default_factory=dict)
    pg: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None

    # ------------------------------------------------------------------ dependencies
    def start_dependencies(self, say=print) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        pg, rd = embedded_servers(self.data_dir, self.settings.embedded_pg_port, self.settings.embedded_redis_port)
        database_url, redis_url = self.settings.database_url, self.settings.redis_url
        if not database_url:
            say(f"starting embedded PostgreSQL 18 + pgvector on 127.0.0.1:{pg.port} ({pg.data_dir})")
            pg.start()
            self.pg, database_url = pg, pg.url
        if not redis_url:
            say(f"starting embedded Redis on 127.0.0.1:{rd.port} ({rd.data_dir})")
            rd.start()
            self.redis, redis_url = rd, rd.url
        self.env = {"REGS_DATABASE_URL": database_url, "REGS_REDIS_URL": redis_url,
                    "REGS_DATA_DIR": str(self.data_dir)}
        self.settings = self.settings.model_copy(update={"database_url": database_url, "redis_url": redis_url})
        self.write_state()

    def stop_dependencies(self) -> None:
        if self.redis is not None:
            self.redis.stop()
        if self.pg is not None:
            self.pg.stop()

    def write_state(self) -> None:
        state = {
            "supervisor_pid": os.getpid(),
            "database_url": self.settings.database_url,
            "redis_url": self.settings.redis_url,
            "embedded": {"postgres": self.pg is not None, "redis": self.redis is not None},
            "gateway_url": f"http://{self.settings.gateway_host}:{self.settings.gateway_port}",
            "processes": {
                name: {"pid": c.process.pid if c.process else None, "alive": c.alive(), "restarts": c.restarts,
                       "log": str(c.log_path), "last_exit": c.last_exit}
                for name, c in self.children.items()
            },
            "updated_at": time.time(),
        }
        (self.data_dir / STATE_FILE).write_text(json.dumps(state, indent=2))

    # ------------------------------------------------------------------ children
    def start_child(self, name: str) -> None:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        child = self.children.setdefault(name, Child(name, logs / f"{name}.log"))
        rotate_log(child.log_path)
        log_file = open(child.log_path, "ab")  # noqa: SIM115 - handed to the child
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
        child.process = subprocess.Popen([sys.executable, "-m", f"services.{name}"], stdout=log_file,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log_file.close()
        child.started_at = time.time()

    def supervise_once(self, say=print) -> None:
        now = time.time()
        for child in self.children.values():
            if child.alive():
                if now - child.started_at > 60:
                    child.backoff = 1.0
                continue
            if child.process is not None and child.next_start == 0.0:
                child.last_exit = child.process.returncode
                child.next_start = now + child.backoff
                say(f"{child.name} exited with {child.last_exit}; restarting in {child.backoff:.0f}s "
                    f"(log: {child.log_path})")
                child.backoff = min(child.backoff * 2, 30.0)
            elif child.next_start and now >= child.next_start:
                child.restarts += 1
                child.next_start = 0.0
                self.start_child(child.name)
        self.write_state()

    def stop_children(self, timeout: float = 15.0) -> None:
        for child in self.children.values():
            if child.alive():
                child.process.send_signal(signal.SIGTERM)
        deadline = time.time() + timeout
        for child in self.children.values():
            if child.process is None:
                continue
            try:
                child.process.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait(5)
        self.write_state()


async def store_is_empty(settings: Settings) -> bool:
    from shared import db

    conn = await db.connect(settings.database_url)
    try:
        return not await conn.fetchval("SELECT count(*) FROM corpus_versions WHERE status = 'active'")
    finally:
        await conn.close()


async def ingest_with_progress(settings: Settings, request, say=print) -> dict:
    """Run an ingest in this process with a progress bar (first start, and `regs ingest`)."""
    from tqdm import tqdm

    from services.ingest.pipeline import IngestPipeline
    from shared import db

    pool = await db.create_pool(settings.database_url, max_size=4)
    bar = tqdm(total=0, unit="section", dynamic_ncols=True, file=sys.stderr)
    last = {"message": None}

    def progress(message: str, done: int, total: int) -> None:
        if message != last["message"]:
            bar.set_description(message)
            last["message"] = message
            bar.reset(total=total or None)
        if total:
            bar.n = done
            bar.refresh()

    try:
        record = await IngestPipeline(pool, settings).run(request, progress)
    finally:
        bar.close()
        await pool.close()
    return record


def rotate_log(path: Path, max_bytes: int = 20 * 1024 * 1024) -> bool:
    """Start a service's log afresh once it outgrows ``max_bytes``, keeping the previous one as ``<name>.log.1``:
    a log appended to by every `regs up` and eval run reached 46 MB. True when it rotated."""
    if not path.exists() or path.stat().st_size < max_bytes:
        return False
    path.replace(path.with_name(path.name + ".1"))
    return True


def wait_ready(url: str, timeout: float, children: dict[str, Child]) -> dict | None:
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            response = httpx.get(f"{url}/readyz", timeout=2)
            last = response.json()
            if response.status_code == 200:
                return last
        except httpx.HTTPError:
            pass
        time.sleep(1)
    return last


def run_up(settings: Settings, *, ingest_on_empty: bool = True, say=print) -> int:
    from shared import db
    from shared.messages import IngestRequest

    data_dir = settings.resolved_data_dir()
    existing = read_state(data_dir)
    if existing and _pid_alive(existing.get("supervisor_pid")):
        say(f"regs is already up (supervisor pid {existing['supervisor_pid']}); `regs down` stops it")
        return 1
    stack = Stack(settings, data_dir)
    started = time.time()
    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        stack.start_dependencies(say)
        asyncio.run(db.migrate(stack.settings.database_url))
        say("schema migrations applied")
        if ingest_on_empty and asyncio.run(store_is_empty(stack.settings)):
            say(f"empty store: ingesting the shipped corpus from {settings.corpus_dir} (first start only)")
            record = asyncio.run(ingest_with_progress(stack.settings, IngestRequest(source="shipped"), say))
            say(f"ingest {record['state']}: {record['message']}")
            if record["state"] != "succeeded":
                say(f"ingest failed: {record.get('error')}")
                return 2
        for name in SERVICES:
            stack.start_child(name)
        gateway = f"http://{settings.gateway_host}:{settings.gateway_port}"
        ready = wait_ready(gateway, 180, stack.children)
        if ready and ready.get("ready"):
            say(f"\nregs is up in {time.time() - started:.0f}s")
        else:
            say(f"\nregs started, but not every check is ready yet: {ready}")
        say(f"  web page   {gateway}/")
        say(f"  API docs   {gateway}/docs")
        say(f"  metrics    {gateway}/metrics (workers: ports {settings.metrics_port_base}-"
            f"{settings.metrics_port_base + 3})")
        say(f"  logs       {data_dir / 'logs'}")
        say("Ctrl-C or `regs down` stops everything.")
        while not stop["flag"]:
            stack.supervise_once(say)
            time.sleep(1)
    finally:
        say("stopping processes")
        stack.stop_children()
        stack.stop_dependencies()
        state_file = data_dir / STATE_FILE
        if state_file.exists():
            state_file.unlink()
        say("stopped")
    return 0


def read_state(data_dir: Path) -> dict | None:
    path = data_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def running_database_url(settings) -> str | None:
    """The database to use: ``REGS_DATABASE_URL`` when set, else the embedded one ``regs up`` started (if any)."""
    if settings.database_url:
        return settings.database_url
    return (read_state(settings.resolved_data_dir()) or {}).get("database_url")


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def run_down(settings: Settings, say=print) -> int:
    data_dir = settings.resolved_data_dir()
    state = read_state(data_dir)
    if state and _pid_alive(state.get("supervisor_pid")):
        os.kill(state["supervisor_pid"], signal.SIGTERM)
        deadline = time.time() + 40
        while _pid_alive(state["supervisor_pid"]) and time.time() < deadline:
            time.sleep(0.3)
        say("regs stopped")
        return 0
    # no supervisor: stop anything it left behind
    if state:
        for info in state.get("processes", {}).values():
            if info.get("pid") and _pid_alive(info["pid"]):
                os.kill(info["pid"], signal.SIGTERM)
    pg, rd = embedded_servers(data_dir, settings.embedded_pg_port, settings.embedded_redis_port)
    rd.stop()
    pg.stop()
    if state:
        (data_dir / STATE_FILE).unlink(missing_ok=True)
    say("nothing was running" if not state else "cleaned up what was left running")
    return 0


def run_status(settings: Settings, say=print) -> int:
    data_dir = settings.resolved_data_dir()
    state = read_state(data_dir)
    if not state:
        say("regs is not up (no state file in %s)" % data_dir)
        return 1
    supervisor = "running" if _pid_alive(state.get("supervisor_pid")) else "NOT running"
    say(f"supervisor  pid {state.get('supervisor_pid')}  {supervisor}")
    for name, info in state.get("processes", {}).items():
        alive = "up" if info.get("pid") and _pid_alive(info["pid"]) else "DOWN"
        say(f"{name:<11} pid {info.get('pid')}  {alive}  restarts {info.get('restarts')}  log {info.get('log')}")
    embedded = state.get("embedded", {})
    say(f"postgres    {_redact(state['database_url'])}  {'embedded' if embedded.get('postgres') else 'external'}")
    say(f"redis       {_redact(state['redis_url'])}  {'embedded' if embedded.get('redis') else 'external'}")
    try:
        ready = httpx.get(f"{state['gateway_url']}/readyz", timeout=3).json()
        for check, value in ready.get("checks", {}).items():
            say(f"  {check:<22} {value}")
        say(f"ready: {ready.get('ready')}")
        return 0 if ready.get("ready") else 1
    except httpx.HTTPError as exc:
        say(f"gateway {state['gateway_url']} unreachable: {exc}")
        return 1


def _redact(url: str) -> str:
    import re

    return re.sub(r"//([^:@/]+):([^@/]+)@", r"//\1:***@", url or "")
