"""A local FastMCP server for the MCP tests: `python mcp_server.py LOG stdio` or
`python mcp_server.py LOG http PORT`. Its `slow_lookup` tool sleeps, and appends to LOG what
became of each call: `start <id>`, then `finished <id>` or `cancelled <id>`. Its
`straggling_lookup` does the same, but only the first request for an id is slow (5 s): the
same request again answers in 0.05 s (a straggler, for hedged calls). Its `noisy_lookup`
logs to the client (MCP logging) while it answers."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp.server.fastmcp import Context, FastMCP


def serve(log: Path, transport: str, port: int = 0) -> None:
    mcp = FastMCP("slow", host="127.0.0.1", port=port, log_level="WARNING")

    def note(line: str) -> None:
        with log.open("a") as f:
            f.write(line + "\n")

    @mcp.tool()
    async def slow_lookup(call: str, seconds: float = 5.0) -> str:
        """Look something up in a slow system."""
        note(f"start {call}")
        try:
            await anyio.sleep(seconds)
        except BaseException:
            note(f"cancelled {call}")
            raise
        note(f"finished {call}")
        return f"found {call}"

    seen: set[str] = set()

    @mcp.tool()
    async def straggling_lookup(call: str) -> str:
        """Look something up in a system whose first answer straggles."""
        seconds = 0.05 if call in seen else 5.0
        seen.add(call)
        return await slow_lookup(call, seconds)

    @mcp.tool()
    async def noisy_lookup(call: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """Look something up, saying so in the client's log."""
        await ctx.info(f"looking up {call}")
        return f"found {call}"

    mcp.run("stdio" if transport == "stdio" else "streamable-http")


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
