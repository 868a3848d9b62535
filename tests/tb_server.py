"""A TensorBoard server for the tests: ``tensorboard --logdir ... --host 127.0.0.1`` on a free
loopback port, as a child process, polled until it lists the runs expected (tests/test_tensorboard.py
and tests/test_tensorboard_tools.py)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

TENSORBOARD = Path(sys.executable).with_name("tensorboard")
STARTUP_TIMEOUT_S = 90  # TensorBoard start + first load, on a busy 2-core machine


def free_port() -> int:
    """A loopback port nobody listens on now (another program may still take it: see PortTaken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Loopback only, and never through a proxy that the environment might name.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_json(url: str, data: bytes | None = None, timeout: float = 10):
    """The JSON a local server answers at ``url`` (a POST when ``data`` is given)."""
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with _OPENER.open(request, timeout=timeout) as response:
        return json.loads(response.read().decode())


class PortTaken(Exception):
    """The free port found was taken before TensorBoard could bind it."""


class TensorBoardServer:
    """``tensorboard --logdir ... --host 127.0.0.1 --port <free>`` as a child process."""

    def __init__(self, logdir: Path, log_file: Path, command: list[str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_file = log_file
        self._log = open(log_file, "wb")
        command = command or [
            str(TENSORBOARD),
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--reload_interval",
            "1",
        ]
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def output(self) -> str:
        self._log.flush()
        return self.log_file.read_text(errors="replace")[-3000:]

    def wait_for_runs(self, expected: set[str], timeout: float = STARTUP_TIMEOUT_S) -> list[str]:
        """Poll /data/runs until every expected run is listed; fail clearly if not in time."""
        deadline = time.monotonic() + timeout
        runs, error = None, None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                if "could not bind" in self.output().lower():
                    raise PortTaken(self.port)  # another program took the free port first
                pytest.fail(
                    f"TensorBoard exited with code {self.process.returncode} before "
                    f"serving; its output:\n{self.output()}"
                )
            try:
                runs = get_json(f"{self.url}/data/runs", timeout=5)
                if expected <= set(runs):
                    return runs
            except OSError as err:  # not listening yet
                error = err
            time.sleep(0.1)
        pytest.fail(
            f"TensorBoard did not come up at {self.url} within {timeout:.0f} s "
            f"(last answer: {runs!r}, last error: {error}); expected runs {sorted(expected)}; "
            f"its output:\n{self.output()}"
        )

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
        self._log.close()


@contextlib.contextmanager
def serving(logdir: Path, log_folder: Path):
    """A TensorBoard over ``logdir``, once it lists every run there (``server.runs``); stopped after."""
    assert TENSORBOARD.is_file(), f"no tensorboard program beside {sys.executable}"
    events = [p.relative_to(logdir) for p in logdir.rglob("*tfevents*")]
    expected = {e.parent.as_posix() for e in events if not any(part.startswith(".") for part in e.parts)}
    for attempt in range(3):
        server = TensorBoardServer(logdir, log_folder / f"tensorboard-{attempt}.log")
        try:
            server.runs = server.wait_for_runs(expected)
            break
        except PortTaken:
            server.stop()
        except BaseException:
            server.stop()  # never leave a server behind
            raise
    else:
        pytest.fail("TensorBoard could not bind a free loopback port in 3 attempts")
    try:
        yield server
    finally:
        server.stop()
    assert server.process.returncode is not None
