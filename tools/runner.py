"""The tools' one notebook runner: nbclient's NotebookClient, set up the same way for the student
edition's checks (``student``), ``regenerate``, the grader (``grade``) and the tests.

    client = notebook_client(nb, folder, timeout=600)
    client.execute()                      # or, cell by cell: with client.setup_kernel(): ...

Where a kernel is not what is being tested (the student edition's Run-all in tests/),
:func:`run_in_process` runs the cells in the calling Python instead: no kernel start, torch imported once.

Cells tagged ``nbval-skip`` (the ``%tensorboard`` launchers) are not run, as under nbval:
:func:`blank_skipped` empties them for the run and returns their sources for :func:`restore_skipped`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from nbclient import NotebookClient
from traitlets import Type


class _CappedClient(NotebookClient):
    """A NotebookClient that keeps at most ``max_output`` characters of each cell's output (errors
    always), then one line saying the rest was dropped, then the last ``max_tail`` characters of
    its streams (whole lines): a print loop cannot fill the runner's memory, and the verdict a
    check prints last (its ``PASS`` line) survives however much came before it."""

    max_output = 2_000_000
    max_tail = 20_000

    def output(self, outs, msg, display_id, cell_index):
        if msg["msg_type"] == "error":
            return super().output(outs, msg, display_id, cell_index)
        text = msg.get("content", {}).get("text", "") if msg["msg_type"] == "stream" else ""
        if len(outs) >= 2 and outs[-2].get("name") == "runner":  # capped already: only the tail grows
            _keep_tail(outs[-1], text, self.max_tail)
            return None
        size = sum(len(str(value)) for value in msg.get("content", {}).values())
        kept = sum(len(str(o)) for o in outs) if len(outs) < 1000 else self.max_output
        if kept + size > self.max_output:
            note = "\n[the rest of this output was dropped: too long; its last lines follow]\n"
            outs.append(nbformat.v4.new_output("stream", name="runner", text=note))
            outs.append(nbformat.v4.new_output("stream", name="stdout", text=""))
            _keep_tail(outs[-1], text, self.max_tail)
            return None
        return super().output(outs, msg, display_id, cell_index)

    def _update_display_id(self, display_id, msg):
        """An update of an earlier display (``update_display``) replaces its data in place, past :meth:`output`'s
        cap: one that would make a cell's output larger than ``max_output`` is dropped."""
        size = sum(len(str(value)) for value in msg.get("content", {}).values())
        for cell_index, indices in self._display_id_map.get(display_id, {}).items():
            outs = self.nb["cells"][cell_index]["outputs"]
            if sum(len(str(o)) for o in outs) + size * len(indices) > self.max_output:
                return None
        return super()._update_display_id(display_id, msg)

    def handle_comm_msg(self, outs, msg, cell_index):
        """A kernel's comm messages (widgets) are dropped, whatever they hold: nbclient would keep each widget's
        state in this process's memory for as long as the kernel runs, fail at a widget without one, and let its
        stand-in for an Output widget take a cell's outputs past :meth:`output`'s cap (sending them all back to
        the kernel at each new one)."""
        return None


def _keep_tail(out, text: str, limit: int) -> None:
    """Append ``text`` to the stream output ``out``, keeping its last ``limit`` characters, cut at a line start."""
    tail = out.text + text
    if len(tail) > limit:
        tail = tail[-limit:]
        start = tail.find("\n")
        tail = tail[start + 1 :] if 0 <= start < len(tail) - 1 else tail
    out.text = tail


MAX_MESSAGE = 64 * 2**20  # bytes of one message from a kernel read by a client of :func:`bound_messages`
MESSAGES_QUEUED = 4  # whole messages of a kernel's that such a client's sockets hold before it reads them


class _BoundedChannel(AsyncZMQSocketChannel):
    """A channel that reads a kernel's message part by part and keeps at most :data:`MAX_MESSAGE` bytes of it: a
    larger one (the same 50 MB buffer sent as 100 parts of one message: 5 GB) becomes an error output in its place,
    never copied or parsed. (libzmq holds every part of a message before its first is read: the grader bounds that
    with its workers' memory cap, tools/grade.py ``cap_worker``.)"""

    async def _recv(self, **kwargs: Any) -> dict[str, Any]:
        parts, size = [], 0
        while True:
            part = await self.socket.recv(copy=False)
            size += len(part)
            if size <= MAX_MESSAGE:
                parts.append(part.bytes)
            if not part.more:
                break
        if size > MAX_MESSAGE:
            return _too_large(parts, size, self.session)
        _, message = self.session.feed_identities(parts)
        return self.session.deserialize(message)


def _too_large(parts: list[bytes], size: int, session: Any) -> dict[str, Any]:
    """A message too large to read, as an error the client records in its place: an ``error`` output, or (for a
    ``..._reply``) a reply whose status is ``error``, under the parent header the message named (when it could be read)."""
    try:
        at = parts.index(b"<IDS|MSG>")
        header, parent = session.unpack(parts[at + 2]), session.unpack(parts[at + 3])
    except Exception:  # the header itself was one of the parts left out
        header, parent = {}, {}
    header = header if isinstance(header, dict) else {}
    kind = str(header.get("msg_type", ""))
    kind = kind if kind.endswith("_reply") else "error"
    content = {
        "status": "error",
        "ename": "MessageTooLarge",
        "evalue": f"the kernel sent a message of {size:,} bytes, more than {MAX_MESSAGE:,}: not read",
        "traceback": [],
        "execution_count": None,
    }
    return {
        "header": {**header, "msg_type": kind},
        "msg_id": str(header.get("msg_id", "")),
        "msg_type": kind,
        "parent_header": parent if isinstance(parent, dict) else {},
        "metadata": {},
        "content": content,
        "buffers": [],
    }


class BoundedKernelClient(AsyncKernelClient):
    """A kernel client whose sockets refuse a message part over :data:`MAX_MESSAGE` bytes before it is read (libzmq
    drops that connection for good: no output comes any more, and the grader's time limit gives the cell a new
    kernel), queue at most :data:`MESSAGES_QUEUED` messages unread (the kernel's
    own socket holds the rest: a flood of large messages waits there, not in this process), and whose channels
    keep no more than :data:`MAX_MESSAGE` bytes of one message however many parts it has."""

    shell_channel_class = Type(_BoundedChannel)
    iopub_channel_class = Type(_BoundedChannel)
    stdin_channel_class = Type(_BoundedChannel)
    control_channel_class = Type(_BoundedChannel)

    def _context_default(self) -> zmq.asyncio.Context:
        self._created_context = True
        return capped_context(zmq.asyncio.Context())


def capped_context(context: zmq.Context) -> zmq.Context:
    """``context``, whose new sockets refuse a message part over :data:`MAX_MESSAGE` bytes (libzmq reads its size
    first, and drops the connection without reading it) and queue at most :data:`MESSAGES_QUEUED` messages unread."""
    context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    context.setsockopt(zmq.RCVHWM, MESSAGES_QUEUED)
    return context


def bound_messages(km: Any) -> None:
    """Make the kernel manager ``km`` (before its client is made) read no message of its kernel larger than
    :data:`MAX_MESSAGE` bytes: a kernel's single message of gigabytes would be read whole otherwise."""
    km.client_factory = BoundedKernelClient
    capped_context(km.context)


def notebook_client(
    nb: nbformat.NotebookNode,
    folder: str | Path,
    *,
    timeout: float,
    allow_errors: bool = False,
    kernel_name: str = "python3",
    max_output: int | None = None,
    **kwargs: Any,
) -> NotebookClient:
    """A client that runs ``nb`` in a fresh kernel whose working folder is ``folder``; with
    ``max_output``, each cell keeps at most that many characters of output."""
    options = dict(
        timeout=timeout,
        kernel_name=kernel_name,
        allow_errors=allow_errors,
        record_timing=False,
        resources={"metadata": {"path": str(folder)}},
        **kwargs,
    )
    if max_output is None:
        return NotebookClient(nb, **options)
    client = _CappedClient(nb, **options)
    client.max_output = max_output
    return client


def is_skipped(cell: nbformat.NotebookNode) -> bool:
    """A code cell nbval does not run (tagged ``nbval-skip``)."""
    return cell.cell_type == "code" and "nbval-skip" in cell.get("metadata", {}).get("tags", [])


def blank_skipped(nb: nbformat.NotebookNode) -> dict[int, str]:
    """Empty the cells nbval skips (nbclient passes over a blank cell); return their sources."""
    skipped = {}
    for index, cell in enumerate(nb.cells):
        if is_skipped(cell):
            skipped[index] = cell.source
            cell.source = ""
    return skipped


def restore_skipped(nb: nbformat.NotebookNode, skipped: dict[int, str]) -> None:
    """Put back what :func:`blank_skipped` emptied, without outputs."""
    for index, source in skipped.items():
        nb.cells[index].update(source=source, outputs=[], execution_count=None)


def run_in_process(nb: nbformat.NotebookNode, folder: str | Path, *, timeout: float) -> None:
    """Run ``nb``'s code cells in this Python, in a fresh IPython shell, as a kernel would with
    ``allow_errors=True``: each cell's printed text and its error (ename, evalue) land in its
    ``outputs``, and a cell that fails does not stop the next. For tests where a kernel is not what
    is being tested: no kernel start, no second import of torch. Each cell stops after ``timeout``
    seconds. What a notebook may change that would outlive it here is put back afterwards
    (:func:`_restored`): the working folder (``folder`` during the run), the environment, sys.path,
    warning filters, torch's defaults, open figures."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    from traitlets.config import Config

    from labsupport.checks.running import TimedOut, time_limit

    config = Config()
    config.HistoryManager.enabled = False  # no sqlite file, no history thread
    with _restored(folder):
        InteractiveShell.clear_instance()
        shell = InteractiveShell.instance(config=config)  # inside: it installs its own __main__ and hooks
        try:
            for cell in nb.cells:
                if cell.cell_type != "code" or not cell.source.strip():
                    continue
                with capture_output(display=False) as captured:
                    try:
                        with time_limit(timeout):
                            result = shell.run_cell(cell.source, store_history=False)
                        error = result.error_before_exec or result.error_in_exec
                    except TimedOut as stopped:  # outside the cell's code; inside it, IPython hands it back
                        error = stopped
                if isinstance(error, TimedOut):
                    error = TimeoutError(f"the cell did not finish within {timeout:g} s")
                cell.outputs = _outputs(captured.stdout, captured.stderr, error)
        finally:
            _reset(shell)
            InteractiveShell.clear_instance()


def _reset(shell) -> None:
    """``shell.reset()``: it deletes the namespace's names one by one, and deleting one may take another with it
    (torch 2.6's Dynamo removes its ``__resume_at_...`` functions then), which reset reports as a KeyError: the
    names left are deleted by the next try."""
    for _ in range(10):
        try:
            shell.reset(new_session=False)
            return
        except KeyError:
            continue
    shell.reset(new_session=False)


def _outputs(stdout: str, stderr: str, error: BaseException | None) -> list:
    """A cell's outputs as nbclient would store them: its streams, then its error (no traceback)."""
    outputs = []
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        if text:
            outputs.append(nbformat.v4.new_output("stream", name=name, text=text))
    if error is not None:
        outputs.append(nbformat.v4.new_output("error", ename=type(error).__name__, evalue=str(error), traceback=[]))
    return outputs


@contextlib.contextmanager
def _restored(folder: str | Path) -> Iterator[None]:
    """Run the block in ``folder``; afterwards put back the working folder, the ``__main__`` module
    and sys's hooks, the environment, sys.path, the warning filters, torch's default dtype, grad
    mode and thread count, and close the figures the block left open."""
    import torch

    cwd = os.getcwd()
    environ = dict(os.environ)
    path = list(sys.path)
    main = sys.modules["__main__"]  # an IPython shell puts its own in: spawned processes read its __spec__
    hooks = (sys.displayhook, sys.excepthook)
    dtype = torch.get_default_dtype()
    grad = torch.is_grad_enabled()
    threads = torch.get_num_threads()
    os.chdir(folder)
    try:
        with warnings.catch_warnings():
            yield
    finally:
        os.chdir(cwd)
        sys.modules["__main__"] = main
        sys.displayhook, sys.excepthook = hooks
        os.environ.clear()
        os.environ.update(environ)
        sys.path[:] = path
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.set_num_threads(threads)
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
