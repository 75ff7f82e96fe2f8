#!/usr/bin/env python3
"""Ask regs a question over Redis streams, from any system: a standalone example to copy.

Needs only the ``redis`` package (``pip install redis``); it imports nothing from this project.

The contract (the AsyncAPI document is served by the gateway at ``/asyncapi.json``):

1. Add an entry to the stream ``regs.query.requests`` with ONE field, ``json``, holding an Envelope::

       XADD regs.query.requests MAXLEN ~ 10000 * json '{"request_id": "...", "trace_id": "...",
            "deadline": 1767225600.0, "reply_to": "regs.replies.<your-id>", "kind": "query",
            "payload": {"question": "How much milkfat must gouda cheese contain?"}}'

   ``request_id`` is the idempotency key (resending the same id gets the same answer, computed once);
   ``deadline`` is the unix time after which you will no longer wait (work that starts later is dropped);
   ``reply_to`` is a stream only you read. ``payload`` may also carry ``top_k`` (1-50) and ``mode``
   ("hybrid", "dense", "fulltext").
2. Read ``reply_to`` with ``XREAD BLOCK`` until an entry arrives whose ``json`` field is a Reply with your
   ``request_id``: ``{"request_id", "trace_id", "kind": "query", "ok": true|false, "error": {"code",
   "message"} | null, "payload": <QueryResult>, "worker"}``.
3. Delete your reply stream when done (it also expires on its own some minutes after the last reply).

A QueryResult has ``status`` "answered" (``plain_english``, ``legal``, ``quotes``, ``citations``) or "refused"
(``refusal.reason`` and ``refusal.message``), a ``confidence`` and a ``model`` label naming the model that
actually produced the text (``model.answered``; ``model.requested`` is the configured one).

Usage::

    python producer.py --redis-url redis://127.0.0.1:6379/0 --question "How much milkfat must gouda contain?"

Exit status: 0 answered, 1 refused, 2 error reply, 3 timed out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import uuid

import redis

REQUEST_STREAM = "regs.query.requests"
REPLY_PREFIX = "regs.replies."


def ask(redis_url: str, question: str, timeout: float = 60.0) -> dict:
    """Send one question and wait for its Reply; returns the Reply as a dict (raises TimeoutError)."""
    client = redis.Redis.from_url(redis_url, decode_responses=True, socket_connect_timeout=5)
    request_id = uuid.uuid4().hex
    reply_stream = f"{REPLY_PREFIX}example-{uuid.uuid4().hex[:12]}"  # our own: nobody else reads it
    envelope = {
        "request_id": request_id,
        "trace_id": request_id,
        "deadline": time.time() + timeout,
        "reply_to": reply_stream,
        "kind": "query",
        "payload": {"question": question},
    }
    try:
        client.xadd(REQUEST_STREAM, {"json": json.dumps(envelope)}, maxlen=10000, approximate=True)
        last_id = "0-0"  # the reply stream is new and ours: read it from the start
        give_up = time.monotonic() + timeout
        while (left := give_up - time.monotonic()) > 0:
            block_ms = max(1, min(int(left * 1000), 5000))
            for _stream, entries in client.xread({reply_stream: last_id}, block=block_ms, count=10) or []:
                for entry_id, fields in entries:
                    last_id = entry_id
                    reply = json.loads(fields["json"])
                    if reply.get("request_id") == request_id and reply.get("kind") == "query":
                        return reply
        raise TimeoutError(f"no reply to {request_id} within {timeout:.0f}s")
    finally:
        client.delete(reply_stream)
        client.close()


def show(reply: dict) -> int:
    """Print the reply for a person; returns the exit status."""
    if not reply.get("ok"):
        error = reply.get("error") or {}
        print(f"error: {error.get('code')}: {error.get('message')}")
        return 2
    result = reply["payload"]
    model = result.get("model") or {}
    print(f"status: {result['status']}")
    if result["status"] == "answered":
        print(f"answer: {result.get('plain_english')}")
        print(f"legal: {result.get('legal')}")
        for citation in result.get("citations", []):
            print(f"citation: {citation['cfr_ref']}{citation.get('paragraph') or ''}")
    else:
        refusal = result.get("refusal") or {}
        print(f"refusal: {refusal.get('reason')}: {refusal.get('message')}")
    print(f"confidence: {result['confidence']['tier']} ({result['confidence']['score']:.2f})")
    print(f"model: {model.get('answered') or 'none'} (requested {model.get('requested')})")
    if model.get("fallback_reason"):
        print(f"fallback: {model['fallback_reason']}")
    return 0 if result["status"] == "answered" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Ask regs a question over Redis streams.")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="the bus's Redis")
    parser.add_argument("--question", required=True, help="the question to ask")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the reply")
    args = parser.parse_args(argv)
    try:
        reply = ask(args.redis_url, args.question, args.timeout)
    except TimeoutError as exc:
        print(f"timeout: {exc}")
        return 3
    return show(reply)


if __name__ == "__main__":
    sys.exit(main())
