"""The embedded servers and service logs stay in proportion to what they hold, across restarts."""
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


def test_a_service_log_is_rotated_once_it_outgrows_its_bound(tmp_path):
    from shared.supervisor import rotate_log

    log = tmp_path / "scorer.log"
    log.write_bytes(b"old line\n" * 100)
    assert rotate_log(log, max_bytes=10_000) is False and log.stat().st_size == 900
    log.write_bytes(b"old line\n" * 2000)
    assert rotate_log(log, max_bytes=10_000) is True
    assert not log.exists() and (tmp_path / "scorer.log.1").read_bytes().startswith(b"old line")
    log.write_bytes(b"newer\n" * 2000)
    assert rotate_log(log, max_bytes=10_000) is True  # the one before is replaced: two logs at most
    assert (tmp_path / "scorer.log.1").read_bytes().startswith(b"newer")
