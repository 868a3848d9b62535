"""`make lab` serves the student edition, and a notebook in it finds the lab's own tools.

Starts the real target, as the user who runs the tests (root in most containers: no
extra flag needed), on a free loopback port (LAB_PORT) with a known token
(JUPYTER_TOKEN) and a PATH without the venv, as a fresh shell has. Through the
running server it reads the served folder (REST API), starts a kernel and runs a
notebook's ``%tensorboard`` cell in it (jupyter_client on the connection file the
server wrote): the magic must find ``tensorboard`` on the kernel's PATH and start
it. Then TensorBoard, the kernel and `make lab` are stopped, and no process of
theirs may be left.
"""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from procs import alive, descendants

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent  # the venv running the tests (.venv, or make test-oldest's)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
STARTUP_S = 120  # a cold JupyterLab on a busy 2-core machine takes 5-30 s


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url: str, token: str | None = None, method: str = "GET"):
    req = urllib.request.Request(
        url,
        method=method,
        data=b"{}" if method == "POST" else None,
        headers={"Authorization": f"token {token}"} if token else {},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, json.loads(resp.read().decode() or "null")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group (make, the shell, jupyter); SIGKILL what is left after 15 s."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            # the group may outlive its leader for a moment
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                os.killpg(proc.pid, 0)
                time.sleep(0.2)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            continue


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` running; yields (base url, token, student folder, log file, runtime dir)."""
    tmp = tmp_path_factory.mktemp("lab")
    port, token = free_port(), "lab-test-" + os.urandom(8).hex()
    out, log, runtime = tmp / "student", tmp / "make_lab.log", tmp / "runtime"
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != VENV_BIN.resolve()
    )
    env = dict(
        os.environ,
        JUPYTER_TOKEN=token,
        JUPYTER_RUNTIME_DIR=str(runtime),
        PATH=path,
        LAB_RUNS_DIR=str(tmp / "lab runs"),  # not ../runs of the student folder, and a space in it
    )
    env.pop("LAB_ARGS", None)
    for test_only in ("JUPYTER_PATH",):  # a test's own kernelspecs: a student has the stock one
        env.pop(test_only, None)
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [
                "make",
                "--no-print-directory",
                "-o",
                ".venv/.installed",
                "lab",
                f"LAB_PORT={port}",
                f"STUDENT_DIR={out}",
                f"BIN={VENV_BIN}",
            ],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    family: set[int] = set()
    try:
        last, deadline = "no answer yet", time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(
                    f"`make lab` exited with status {proc.returncode} before serving:\n{log.read_text()[-3000:]}"
                )
            try:
                request(f"{base}/api/status", token)
                break
            except (OSError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
        else:
            pytest.fail(
                f"`make lab` did not answer on {base} within {STARTUP_S} s (last: {last}). "
                f"Its output:\n{log.read_text()[-3000:]}"
            )
        yield base, token, out, log, runtime, family, proc.pid
        family |= descendants(proc.pid)
    finally:
        stop(proc)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(alive(p) for p in family):
            time.sleep(0.2)
        left = {p: Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:200] for p in family if alive(p)}
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not left, f"left running after `make lab` was stopped: {left}"
    with pytest.raises(OSError):  # and the port is free again
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_make_lab_serves_the_student_notebooks_as_root_too(lab):
    base, token, out, log, *_ = lab
    _, body = request(f"{base}/api/contents/", token)
    listed = sorted(item["name"] for item in body["content"])
    assert [p.name for p in NOTEBOOKS if p.name in listed] == [p.name for p in NOTEBOOKS], listed
    # what is served is the student edition, generated by `make lab` itself, with its README
    _, nb = request(f"{base}/api/contents/{NOTEBOOKS[0].name}", token)
    assert nb["content"]["metadata"]["labsupport"]["edition"] == "student"
    assert (out / NOTEBOOKS[0].name).is_file()
    assert "student edition" in (out / "README.md").read_text().lower()
    # token authentication is on: no token, no listing
    with pytest.raises(urllib.error.HTTPError) as denied:
        request(f"{base}/api/contents/")
    assert denied.value.code in (401, 403)
    said = "running as root" in log.read_text() or "you are root" in log.read_text()
    assert said == (os.geteuid() == 0), "make lab should say so exactly when it adds --allow-root"


def test_a_new_student_is_not_asked_to_fetch_news_from_the_network(lab):
    """Stock JupyterLab opens with a toast asking whether to fetch Jupyter's news, and checks for updates:
    both would reach the network, which the lab does not need. The lab's defaults turn them off."""
    base, token, *_ = lab
    _, notification = request(f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification", token)
    defaults = {name: spec.get("default") for name, spec in notification["schema"]["properties"].items()}
    assert defaults["fetchNews"] == "false", defaults  # "none" (not yet asked) shows the toast
    assert defaults["checkForUpdates"] is False, defaults
    _, update = request(f"{base}/lab/api/update", token)
    assert update["notification"] is None, update


def test_a_notebook_finds_the_labs_tools_and_its_tensorboard_cell_starts_tensorboard(lab, tmp_path):
    from jupyter_client import BlockingKernelClient

    base, token, out, _, runtime, family, make_pid = lab
    runs_dir = out.parent / "lab runs"  # the fixture's LAB_RUNS_DIR
    _, kernel = request(f"{base}/api/kernels", token, method="POST")
    connection = runtime / f"kernel-{kernel['id']}.json"
    deadline = time.monotonic() + 60
    while not connection.is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    client = BlockingKernelClient(connection_file=str(connection))
    client.load_connection_file()
    client.start_channels(hb=False)  # the heartbeat can lag on a loaded machine: wait on kernel_info only
    outputs: list[dict] = []

    def run(code: str) -> str:
        outputs.clear()
        reply = client.execute_interactive(code, timeout=120, output_hook=lambda m: outputs.append(m))
        shown = ("stream", "display_data", "update_display_data", "execute_result")
        text = "".join(
            m["content"]["text"] if m["msg_type"] == "stream" else json.dumps(m["content"]["data"])
            for m in outputs
            if m["msg_type"] in shown
        )
        assert reply["content"]["status"] == "ok", f"{code!r} failed: {reply['content']} {text}"
        return text

    try:
        client.wait_for_ready(timeout=60)
        found = json.loads(
            run(
                "import json, shutil\nprint(json.dumps({n: shutil.which(n) for n in ('tensorboard', 'pip', 'python')}))"
            )
        )
        assert found == {n: str(VENV_BIN / n) for n in found}, f"the kernel's PATH finds {found}"

        port = free_port()
        # TensorBoard lists every server's info file in <tempdir>/.tensorboard-info and fails when another test's
        # server removes its file between the listing and the reading: this kernel and its server get their own.
        private = tmp_path / "tmp"
        private.mkdir()
        run(f"import os, tempfile\nos.environ['TMPDIR'] = tempfile.tempdir = {str(private)!r}")
        # a run logged as 02's cells log one, then 02's own %tensorboard cell (on a free port)
        run(
            "import labsupport as lab\nwith lab.tb_writer('02_manual_backprop', 'x') as w:\n    w.add_scalar('loss', 1.0, 0)"
        )
        shown = run(f"{_inline_cell('02_manual_backprop')} --port {port}")
        assert "Could not find" not in shown and "ERROR:" not in shown, shown
        assert str(port) in shown, f"no TensorBoard frame for port {port}: {shown}"
        status, runs = request(f"http://127.0.0.1:{port}/data/runs")
        assert status == 200 and runs == ["x"], runs
        served = json.loads(
            run(
                "from tensorboard import manager\n"
                f"print(json.dumps([[i.pid, i.logdir] for i in manager.get_all() if i.port == {port}]))"
            )
        )
        assert len(served) == 1, served
        pids = [served[0][0]]
        assert Path(served[0][1]) == runs_dir / "02_manual_backprop", served
        server = {pids[0]} | descendants(pids[0])  # TensorBoard and its data server
        family |= descendants(make_pid) | server
    finally:
        client.stop_channels()
        with contextlib.suppress(OSError):
            request(f"{base}/api/kernels/{kernel['id']}", token, method="DELETE")
    # the kernel's shutdown (JupyterLab's, or make lab's when it stops) ends the server its cell started: ipykernel
    # ends a kernel's child processes as it shuts down
    deadline = time.monotonic() + 60
    while any(alive(p) for p in server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in server if alive(p)], "TensorBoard outlived the kernel whose %tensorboard started it"


def _inline_cell(stem: str) -> str:
    """The source of notebooks/<stem>.ipynb's %tensorboard cell."""
    nb = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())
    cells = [
        "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code" and "%tensorboard" in "".join(c["source"])
    ]
    assert len(cells) == 1, cells
    return cells[0]


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, ROOT / "runs"), ("my runs", ROOT / "my runs"), ("/srv/lab runs", Path("/srv/lab runs"))],
)
def test_make_lab_gives_its_kernels_the_runs_folder_make_tensorboard_reads(tmp_path, given, expected):
    """A student folder anywhere (STUDENT_DIR) logs where `make tensorboard` reads: `make lab` hands
    JupyterLab (and so its kernels) LAB_RUNS_DIR as an absolute path. A stand-in `jupyter` records it."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text("#!/bin/sh\nexit 0\n")  # `make lab`'s student-prepare step: nothing to do
    (fake / "jupyter").write_text('#!/bin/sh\nprintf "%s" "$LAB_RUNS_DIR" > "$SEEN"\n')
    for program in fake.iterdir():
        program.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("LAB_RUNS_DIR", "LAB_ARGS")}
    env["SEEN"] = str(tmp_path / "seen")
    if given is not None:
        env["LAB_RUNS_DIR"] = given
    make = ["make", "--no-print-directory", "-o", ".venv/.installed"]
    done = subprocess.run(
        [*make, "lab", f"BIN={fake}", f"STUDENT_DIR={tmp_path / 'elsewhere'}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert Path((tmp_path / "seen").read_text()) == expected
    recipe = subprocess.run([*make, "-n", "tensorboard"], cwd=ROOT, env=env, capture_output=True, text=True).stdout
    read = re.search(r"tensorboard --logdir (.+?) --host", recipe)
    assert read and ROOT / read.group(1) == expected, recipe


def test_the_docs_give_one_test_command_the_makefiles():
    # a pytest command line copied into a document drifts from the Makefile's; the documents
    # name `make test` (or another make target) and `make -n test` prints the real one
    docs = [ROOT / "README.md", ROOT / "docs" / "ci" / "github-actions.yml", *sorted((ROOT / "docs").glob("*.md"))]
    for doc in docs:
        copied = [line for line in doc.read_text().splitlines() if "pytest" in line and "--nbval" in line]
        assert not copied, f"{doc.relative_to(ROOT)} spells out a test command; say `make test` instead: {copied}"
    assert "make test" in (ROOT / "README.md").read_text()
