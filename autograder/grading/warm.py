"""Warm children: a server per lesson that has imported torch once forks every grading job.

A fresh interpreter per job pays for ``import torch`` (1.4 s) and for the parts of torch the
checks first touch (``torch._dynamo``, another 1.5 s) before it runs a single probe. A server,
started by the grader with the student package of one lesson on its path, pays for them once:
it imports the child's code and the modules the lesson's setup cell imports (the import
statements alone: nothing else of the cell, which may come from a submission), and waits. Each job is a fork of that process, which has run
no student's code, so no job can see another's state.

The isolation is the cold child's (sandbox.py). The fork calls unshare(2) for new mount,
network and PID namespaces; its child, PID 1 there, mounts a /proc of the new namespace, hides
the course and the temporary folder with the grader's mount script, then forks the process
that runs the job (``child.main``) and waits for it. When that process ends, PID 1 exits and the
kernel kills whatever the student's code left running in the namespace. Every process in the
chain dies with its parent (PR_SET_PDEATHSIG), so a killed grader leaves nothing behind.

The grader talks to the server over its standard input and output, one line at a time:
the first line (JSON) is the lesson's setup cell, answered by ``ready``; then each exercise's
probes, the same for every student, are named once (a file the server loads, answered by
``loaded``), so that each job carries only its cells; each job is a JSON line, answered by
``pid N`` once forked and ``status CODE`` when it has ended (CODE as ``subprocess`` gives it:
negative for a signal). An ended job stays a zombie, its pid reserved,
until the grader's next line, so that a kill from the grader can never hit a reused pid.
"""

import atexit
import contextlib
import ctypes
import io
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
PR_SET_PDEATHSIG = 1
PARENT_VARIABLE = "AUTOGRADER_WARM_PARENT"


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _die_with_parent(parent=None, how=signal.SIGKILL):
    """Signal ``how`` when the parent exits; exit now if ``parent`` already has (it could have
    before the call). A namespace's PID 1 can't tell (its parent's pid there is 0): its parent is
    in its process group, which the grader kills as a whole."""
    if _libc().prctl(PR_SET_PDEATHSIG, how, 0, 0, 0) != 0 or (parent and os.getppid() != parent):
        os._exit(70)


def _unshare(flags):
    if _libc().unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare: {os.strerror(errno)}")


def _wait_for(pid):
    """Reap children until ``pid`` ends (PID 1 inherits the namespace's orphans); its exit status
    as a shell gives it: the code, or 128 + the signal."""
    while True:
        try:
            ended, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 70
        if ended == pid:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


# ------------------------------------------------------------------------------------ the server
def _run_job(jobdir):
    """The job's own process: what ``python -m autograder.grading.child JOBDIR`` does."""
    code = 1
    try:
        from . import child

        os.chdir(jobdir)  # the job's folder as mounted in the namespace, not the one entered before
        # The process looks as the cold child does to the code it runs: the child is __main__.
        sys.modules["__main__"] = child
        sys.argv = [child.__file__, jobdir]
        child.main(jobdir)
        code = 0
    except BaseException:  # as an uncaught exception ends the cold child: a traceback, status 1
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _forked_job(job, server):
    """In the fork: a session of its own, limits, the job's files as stdio, then the namespaces."""
    from .sandbox import _limit_resources

    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's own handler is not the job's
    _die_with_parent(server)
    jobdir = job["jobdir"]
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(os.path.join(jobdir, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the server's pipes to the grader among them
    os.chdir(jobdir)
    _limit_resources()
    if job.get("script") is None:
        _run_job(jobdir)
    _unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID)
    init = os.fork()
    if init == 0:
        _init(job)
    os._exit(_wait_for(init))


def _init(job):
    """PID 1 of the job's namespace: mount, fork the job, wait for it, exit (ending the rest)."""
    try:
        _die_with_parent()
        # PID 1 receives from inside its namespace only the signals it handles: none.
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(number, signal.SIG_DFL)
        mounted = subprocess.run(["sh", "-c", job["script"]], stdin=subprocess.DEVNULL)
        if mounted.returncode != 0:
            print(f"the sandbox's mounts failed (status {mounted.returncode})", file=sys.stderr, flush=True)
            os._exit(71)
        worker = os.fork()
        if worker == 0:
            _run_job(job["jobdir"])
        os._exit(_wait_for(worker))
    except BaseException:
        os._exit(70)


def _imports_of(source):
    """The top-level import statements of ``source`` (Python), as source; '' if it doesn't parse."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    return "\n".join(ast.unparse(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)))


def _warm_up(prelude):
    """Import what every job will: the child's code, the modules the lesson's setup cell imports,
    and the parts of torch that the first checks load (torch._dynamo, behind the meta device's
    first operations). Only the setup cell's imports run here, never the rest of it: the setup
    cell may come from a submission (a course without the lesson's notebook), and nothing a
    student wrote runs outside the sandbox."""
    import torch
    import torch._dynamo  # noqa: F401

    from . import child  # noqa: F401

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            exec(compile(_imports_of(prelude), "<setup imports>", "exec"), {"__name__": "__warm_up__"})
        except BaseException:  # each job runs the setup cell again, and reports what it raises
            pass
    for device in ("cpu", "meta"):
        x = torch.ones(2, 3, 4, device=device)
        (x @ x.transpose(-2, -1)).softmax(dim=-1).masked_fill(torch.ones(3, 3, dtype=torch.bool, device=device), 0)
    import gc

    gc.collect()
    gc.freeze()  # objects the jobs won't free: their pages stay shared after each fork


def serve():
    # A grader that dies without closing the server (SIGKILL) leaves it SIGTERM, on which it removes
    # its folder (the grader made it its working folder) and exits; its jobs die with it.
    folder = os.getcwd()

    def gone(signum, frame):
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, gone)
    _die_with_parent(int(os.environ.pop(PARENT_VARIABLE, "0")) or os.getppid(), signal.SIGTERM)
    # The pipes to the grader move off 0 and 1, so that nothing printed while warming up can
    # corrupt them; each job's fork closes them.
    control_in, control_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    lines = os.fdopen(control_in, "rb")
    reply = os.fdopen(control_out, "wb", buffering=0)
    first = lines.readline()
    if not first:
        return
    _warm_up(json.loads(first)["prelude"])
    reply.write(b"ready\n")
    server = os.getpid()
    zombie = None
    for line in lines:
        if zombie is not None:
            os.waitpid(zombie, 0)
            zombie = None
        job = json.loads(line)
        if "preload" in job:  # an exercise's probes, the same for every job: loaded once, inherited by each fork
            import torch

            from .child import PRELOADED

            PRELOADED[job["key"]] = torch.load(job["preload"], weights_only=True)
            reply.write(b"loaded\n")
            continue
        pid = os.fork()
        if pid == 0:
            try:
                _forked_job(job, server)
            finally:
                os._exit(70)
        reply.write(f"pid {pid}\n".encode())
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        code = -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status
        reply.write(f"status {code}\n".encode())
        zombie = pid


# ------------------------------------------------------------------------------------ the grader's side
class ServerGone(Exception):
    """The server ended or stopped answering."""


class WarmServer:
    """One server: its folder (with the lesson's student package) and its pipes."""

    def __init__(self, lesson, prelude, child_env, timeout=60.0):
        from ..release import write_student_package

        self.root = Path(tempfile.mkdtemp(prefix="autograder-warm-"))
        self.package = self.root / "package"
        write_student_package(lesson, self.package)
        env = dict(child_env(self.package), **{PARENT_VARIABLE: str(os.getpid())})
        with open(self.root / "server.log", "wb") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "autograder.grading.warm"], cwd=self.root, env=env,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                            start_new_session=True)
        self._buffer = b""
        self.loaded = {}
        try:
            self._send({"prelude": prelude})
            if self._line(timeout) != "ready":
                raise ServerGone("the server did not warm up")
        except BaseException:
            self.close()
            raise

    def _send(self, message):
        try:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError, OSError) as exc:
            raise ServerGone(f"the server is gone ({exc.__class__.__name__})") from None

    def _line(self, timeout):
        """The server's next line, None if none came within ``timeout`` s; ServerGone at its end."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(self.process.stdout.fileno(), 4096)
            if not chunk:
                raise ServerGone(f"the server ended: {self.log_tail()}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def log_tail(self):
        try:
            return (self.root / "server.log").read_text(errors="replace")[-1500:].strip() or "no message"
        except OSError:
            return "no message"

    def preload(self, name, probes):
        """The key under which the server holds ``probes`` (an exercise's), sending them the first time."""
        key = f"{name}-{id(probes)}"
        if key not in self.loaded:
            path = self.root / f"probes-{len(self.loaded)}.pt"
            torch.save(probes, path)
            self._send({"preload": str(path), "key": key})
            if self._line(60.0) != "loaded":
                raise ServerGone("the server did not load the probes")
            path.unlink()
            self.loaded[key] = probes  # kept alive, so that no other object takes its id
        return key

    def start(self, jobdir, script):
        self._send({"jobdir": str(jobdir), "script": script})
        line = self._line(30.0)
        if not line or not line.startswith("pid "):
            raise ServerGone(f"the server did not start the job ({line!r})")
        return WarmJob(self, int(line[4:]))

    @property
    def alive(self):
        return self.process.poll() is None

    def close(self):
        with contextlib.suppress(Exception):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


class WarmJob:
    """A running job, as the sandbox watches one: ``wait(seconds)`` and ``kill()``."""

    def __init__(self, server, pid):
        self.server, self.pid, self.returncode = server, pid, None

    def poll(self):
        return self.wait(0)

    def wait(self, seconds):
        """The job's status, waiting up to ``seconds`` for it; None while it runs."""
        if self.returncode is None:
            try:
                line = self.server._line(seconds)
            except ServerGone:
                self.returncode = -signal.SIGKILL  # the job died with its server
                return self.returncode
            if line is not None:
                self.returncode = int(line.split()[1]) if line.startswith("status ") else -signal.SIGKILL
        return self.returncode

    def kill(self):
        """Kill the job's session (its namespace's PID 1 with it) and wait for its status."""
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)


_SERVERS = {}
# At most this many per grading process, the least recently used closed first (batch grading takes
# the lessons in turn): each holds about 330 MB, 240 MB of it its own.
MAX_SERVERS = 3


def server_for(lesson, prelude, child_env, timeout=60.0):
    """A warm server for ``lesson`` (started now if none is alive), or None where one can't run."""
    key = (lesson.name, prelude)
    server = _SERVERS.get(key)
    if server is not None and not server.alive:
        discard(server)
        server = None
    if server is None:
        while len(_SERVERS) >= MAX_SERVERS:
            _SERVERS.pop(next(iter(_SERVERS))).close()
        try:
            server = WarmServer(lesson, prelude, child_env, timeout)
        except (ServerGone, OSError):
            return None
    _SERVERS[key] = _SERVERS.pop(key, server)  # the most recently used last
    return server


def discard(server):
    for key, value in list(_SERVERS.items()):
        if value is server:
            del _SERVERS[key]
    server.close()


@atexit.register
def close_all():
    while _SERVERS:
        _SERVERS.popitem()[1].close()


def follow_parent(parent):
    """For a worker process of the grader's pool: end (SIGTERM) when ``parent`` does, as its warm
    servers then do. A pool's worker whose parent was killed would otherwise wait forever for work
    on a queue it holds both ends of."""
    if sys.platform.startswith("linux"):
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(0)


def warm_available():
    """Whether jobs are forked from a server here: on Linux (fork, prctl) without a CUDA device,
    unless the environment says AUTOGRADER_WARM=0 (a fresh interpreter per job, as before; for
    comparisons). With a GPU the hidden checks run on it too, and a process forked from one that
    has asked CUDA anything (the setup cell asks torch.cuda.is_available()) can't use CUDA: there
    each job is a fresh interpreter."""
    return (sys.platform.startswith("linux") and os.environ.get("AUTOGRADER_WARM", "1") != "0"
            and not torch.cuda.is_available())


if __name__ == "__main__":
    serve()
