"""The embedded Redis keeps its append-only file in proportion to the data it holds, across restarts."""
from __future__ import annotations

import redis

from shared.embedded import EmbeddedRedis, free_port


def _churn(client: redis.Redis, stream: str, entries: int, keep: int) -> None:
    """What the bus does all day: add entries, then trim the answered ones away."""
    payload = "x" * 1024
    pipe = client.pipeline(transaction=False)
    for i in range(entries):
        pipe.xadd(stream, {"n": str(i), "body": payload})
    pipe.execute()
    client.xtrim(stream, maxlen=keep, approximate=False)


def test_a_bloated_append_only_file_is_compacted_at_start_and_loses_nothing(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis", free_port(), compact_min_bytes=1024 * 1024)
    server.start()
    try:
        with redis.Redis(host="127.0.0.1", port=server.port) as client:
            _churn(client, "regs.test.requests", entries=8000, keep=10)
            client.set("regs.test.key", "kept")
        bloated = server.aof_file.stat().st_size
        assert bloated > 8_000_000  # every XADD is in the log, though only 10 entries are left
        server.stop()

        server.start()  # loads the bloated file, then rewrites it
        compacted = server.aof_file.stat().st_size
        assert compacted < bloated / 20
        with redis.Redis(host="127.0.0.1", port=server.port) as client:
            assert client.xlen("regs.test.requests") == 10
            newest = client.xrevrange("regs.test.requests", count=1)[0][1]
            assert newest[b"n"] == b"7999"
            assert client.get("regs.test.key") == b"kept"

        assert server.compact_log() is False  # in proportion now: nothing to do
    finally:
        server.stop()


def test_a_log_in_proportion_to_its_data_is_left_alone(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis", free_port(), compact_min_bytes=1024 * 1024)
    server.start()
    try:
        with redis.Redis(host="127.0.0.1", port=server.port) as client:
            _churn(client, "regs.test.requests", entries=3000, keep=3000)  # nothing trimmed: the log is the data
        before = server.aof_file.stat().st_size
        assert server.compact_log() is False
        assert server.aof_file.stat().st_size == before
    finally:
        server.stop()
