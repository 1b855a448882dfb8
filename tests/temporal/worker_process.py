"""A worker in a process of its own, for the test that kills it (SIGKILL) mid-activity:
`python -m tests.temporal.worker_process ADDRESS QUEUE`. It prints "ready" once polling."""

from __future__ import annotations

import asyncio
import sys

from temporalio.client import Client

from tests.temporal.test_temporal import killable_worker


async def main(address: str, queue: str) -> None:
    client = await Client.connect(address)
    async with killable_worker(client, queue):
        print("ready", flush=True)
        await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
