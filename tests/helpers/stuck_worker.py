"""A worker process that takes entries and never finishes them: the test SIGKILLs it mid-message."""
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel  # noqa: E402

from shared.bus import StreamWorker  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.streams import Operation, StreamSpec  # noqa: E402


class Echo(BaseModel):
    text: str
    fail: bool = False
    sleep: float = 0.0


async def main(redis_url: str, stream: str, marker: str) -> None:
    spec = StreamSpec(stream, "echo", "echo for tests", (Operation("echo", Echo, Echo),))

    async def handler(kind, payload, envelope):
        Path(marker).write_text(envelope.request_id)  # tell the test we are mid-message
        await asyncio.sleep(3600)

    worker = StreamWorker(spec, handler, Settings(redis_url=redis_url, database_url="unused"))
    await worker.start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
