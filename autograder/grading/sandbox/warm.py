"""Warm children: a server per lesson that has imported torch once forks every grading job.

A fresh interpreter per job pays for ``import torch`` (1.4 s) and for the parts of torch the
checks first touch (``torch._dynamo``, another 1.5 s) before it runs a single probe. A server,
started by the grader with the student package of one lesson on its path, pays for them once:
it imports the child's code and the modules the lesson's setup cell imports (the import
statements alone: nothing else of the cell, which may come from a submission), and waits. Each job
is a fork of that process, which has run no student's code, so no job can see another's state.

At the ``full`` level the server itself runs in bubblewrap's sandbox (jail.py: read-only system and
Python folders, its student package, the folder of its jobs at /jobs, nothing else) and holds no
privilege outside it. Each job's fork makes its own user, mount, PID, network, IPC and UTS
namespaces (the server maps its ids); its PID 1 mounts what the job must not share with the next
(confine.private_mounts: /proc, /tmp, /dev/shm, its own folder at /job and no other), then forks
the process that runs the job, which drops to the unprivileged uid with no capability,
``no_new_privs`` and the seccomp filter (confine.drop_privileges) before it reads the job. When
that process ends, PID 1 exits and the kernel kills whatever the student's code left running in
the namespace. At the ``user`` level the fork only drops its privilege. Every process in the chain
dies with its parent (PR_SET_PDEATHSIG); a keeper shell outside the sandbox removes the server's
folder when the grader goes, however it goes.

The grader talks to the server over its standard input and output, one line at a time: the first
line (JSON) is the lesson's setup cell, answered by ``ready``; then each exercise's probes, the
same for every student, are named once (a file the server loads, answered by ``loaded``), so that
each job carries only its cells; each job is a JSON line, answered by ``started`` once forked and
``status CODE`` when it has ended (CODE as ``subprocess`` gives it: negative for a signal); a
``kill`` line while it runs ends it. Pids stay the server's: the grader never signals a pid it
can't see.
"""

import atexit
import contextlib
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

from . import confine, jail

LEVEL_VARIABLE, IDS_VARIABLE = "AUTOGRADER_SANDBOX_LEVEL", "AUTOGRADER_JOB_IDS"


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
def _run_job(jobdir, level, ids, rules):
    """The job's own process: drop privilege, then what ``python -m autograder.grading.child JOBDIR`` does."""
    code = 1
    try:
        from .. import child

        os.chdir(jobdir)  # the job's folder as mounted in the namespace, not the one entered before
        if level in ("full", "user"):
            confine.drop_privileges(*ids, rules)
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


def _report_and_exit(code):
    """What went wrong while setting a job up, into the job's output (the grader shows its end)."""
    import traceback

    with contextlib.suppress(Exception):
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(code)


def _forked_job(job, server, level, ids, rules, handshake):
    """In the fork: a session of its own, limits, the job's files as stdio, then its namespaces."""
    from . import _limit_resources

    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's own handler is not the job's
    confine.die_with_parent(signal.SIGKILL)
    if os.getppid() != server:
        os._exit(70)
    jobdir = f"{confine.JOBS_FOLDER}/{job['name']}" if level == "full" else job["path"]
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(os.path.join(jobdir, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    keep = sorted(handshake[1:3]) if handshake else []
    low = 3
    for fd in keep:  # every other descriptor closed: the server's pipes to the grader among them
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
    os.chdir(jobdir)
    _limit_resources()
    if level != "full":
        _run_job(jobdir, level, ids, rules)
    confine.enter_namespaces(handshake[1], handshake[2])
    init = os.fork()
    if init == 0:
        _init(job, ids, rules)
    os._exit(_wait_for(init))


def _init(job, ids, rules):
    """PID 1 of the job's namespaces: mount, fork the job, wait for it, exit (ending the rest)."""
    try:
        confine.die_with_parent(signal.SIGKILL)
        # PID 1 receives from inside its namespace only the signals it handles: none.
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(number, signal.SIG_DFL)
        try:
            confine.private_mounts(job["name"], job.get("python_in_tmp", ()))
        except OSError as exc:
            print(f"the sandbox's mounts failed: {exc}", file=sys.stderr, flush=True)
            os._exit(71)
        worker = os.fork()
        if worker == 0:
            _run_job(confine.JOB_FOLDER, "full", ids, rules)
        os._exit(_wait_for(worker))
    except BaseException:
        _report_and_exit(70)


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
    the parts of torch that the first checks load (torch._dynamo, behind the meta device's first
    operations), and what the forbidden built-ins are. Only the setup cell's imports run here, never the rest of it: the setup
    cell may come from a submission (a course without the lesson's notebook), and nothing a
    student wrote runs outside the sandbox."""
    import torch
    import torch._dynamo  # noqa: F401

    from .. import child  # noqa: F401

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            exec(compile(_imports_of(prelude), "<setup imports>", "exec"), {"__name__": "__warm_up__"})
        except BaseException:  # each job runs the setup cell again, and reports what it raises
            pass
    from ...checks import forbidden, runner
    from ...curriculum import LESSONS

    runner.warm_up()  # the probes' first operations (the meta device's, the dispatch modes')
    # What each exercise's refused built-ins are, looked up once: each job then only registers them.
    forbidden.prepare(sorted({name for lesson in LESSONS.values() for exercise in lesson.exercises
                              for name in exercise.forbidden}))
    import gc

    gc.collect()
    gc.freeze()  # objects the jobs won't free: their pages stay shared after each fork


class _Lines:
    """Lines from a descriptor, read without a buffer that select() can't see."""

    def __init__(self, fd):
        self.fd, self.buffer = fd, b""

    def pending(self):
        return b"\n" in self.buffer

    def read(self):
        """The next line; None at the end."""
        while b"\n" not in self.buffer:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


def _run(job, server, level, ids, rules, lines, reply):
    """Fork one job, map its user namespace, answer ``started``, then ``status`` when it ends (a ``kill``
    line from the grader ends it first)."""
    handshake = None
    if level == "full":
        ready_r, ready_w = os.pipe()
        mapped_r, mapped_w = os.pipe()
        handshake = (ready_r, ready_w, mapped_r, mapped_w)
    pid = os.fork()
    if pid == 0:
        try:
            _forked_job(job, server, level, ids, rules, handshake)
        except BaseException:
            _report_and_exit(70)
        os._exit(70)
    if handshake:
        os.close(handshake[1])
        os.close(handshake[2])
        try:
            if os.read(ready_r, 1) == b"u":
                confine.write_id_maps(pid, *confine.id_maps(os.getuid(), os.getgid(), *ids), proc=confine.SERVER_PROC)
                os.write(mapped_w, b"m")
        except OSError as exc:  # the job can't go on: it says so and exits
            print(f"mapping a job's ids failed: {exc}", file=sys.stderr, flush=True)
        finally:
            os.close(ready_r)
            os.close(mapped_w)
    reply.write(b"started\n")
    ended = os.pidfd_open(pid)
    try:
        while True:
            if not lines.pending():
                ready, _, _ = select.select([ended, lines.fd], [], [])
                if ended in ready:
                    break
            line = lines.read()
            if line is None or json.loads(line).get("kill"):  # the grader is gone, or ends the job
                for kill in (os.killpg, os.kill):
                    with contextlib.suppress(ProcessLookupError):
                        kill(pid, signal.SIGKILL)
                select.select([ended], [], [])
                break
    finally:
        os.close(ended)
    _, status = os.waitpid(pid, 0)
    reply.write(f"status {os.waitstatus_to_exitcode(status)}\n".encode())


def serve():
    level = os.environ.pop(LEVEL_VARIABLE, "none")
    ids = tuple(int(part) for part in os.environ.pop(IDS_VARIABLE, "0:0").split(":"))
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
    confine.die_with_parent(signal.SIGTERM)
    # The pipes to the grader move off 0 and 1, so that nothing printed while warming up can
    # corrupt them; each job's fork closes them.
    control_in, control_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    lines = _Lines(control_in)
    reply = os.fdopen(control_out, "wb", buffering=0)
    first = lines.read()
    if not first:
        return
    _warm_up(json.loads(first)["prelude"])
    rules = confine.seccomp_filter() if level in ("full", "user") else None
    reply.write(b"ready\n")
    server = os.getpid()
    while True:
        line = lines.read()
        if line is None:
            return
        job = json.loads(line)
        if job.get("kill"):  # for a job that has ended already
            continue
        if "preload" in job:  # an exercise's probes, the same for every job: loaded once, inherited by each fork
            from ..child import PRELOADED

            PRELOADED[job["key"]] = torch.load(job["preload"], weights_only=True)
            reply.write(b"loaded\n")
            continue
        _run(job, server, level, ids, rules, lines, reply)


# ------------------------------------------------------------------------------------ the grader's side
class ServerGone(Exception):
    """The server ended or stopped answering."""


# Outside the sandbox, the server's parent: it ends the server and removes the server's folder when the
# grader goes (its parent-death signal is SIGTERM), however the grader goes (a grader that lives
# removes it itself, after reading the server's log); the sandboxed server can't
# remove what is outside its sandbox. The server's standard input is the keeper's, passed on by hand:
# a shell gives a command started with & /dev/null for input.
_KEEPER = """
folder=$1; shift
trap 'kill -KILL $server 2>/dev/null; wait $server; rm -rf "$folder"; exit 0' TERM
exec 3<&0
"$@" <&3 3<&- &
server=$!
exec 3<&-
wait $server
"""


def _keeper_start():
    confine.die_with_parent(signal.SIGTERM)


class WarmServer:
    """One server: its folder (with the lesson's student package and its jobs' folders) and its pipes."""

    def __init__(self, lesson, prelude, level, child_env, timeout=60.0):
        from ...release import write_student_package

        self.root = Path(tempfile.mkdtemp(prefix="autograder-warm-"))
        os.chmod(self.root, 0o711)
        self.package = self.root / "package"
        write_student_package(lesson, self.package)
        self.jobs = self.root / "jobs"
        self.jobs.mkdir(mode=0o711)  # entered, never listed, by the jobs' uid
        self.level = level
        env = dict(child_env(self.package, level), **{LEVEL_VARIABLE: level,
                                                       IDS_VARIABLE: ":".join(map(str, jail.job_ids()))})
        command = [sys.executable, "-c", "from autograder.grading.sandbox.warm import serve; serve()"]
        keeper = ["sh", "-c", _KEEPER, "keeper", str(self.root)]
        options = dict(env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True,
                       preexec_fn=_keeper_start)
        with open(self.root / "server.log", "wb") as log:
            if level == "full":
                self.process = jail.popen(command, self.package, jobs=self.jobs, stderr=log, wrap=keeper, **options)
            else:
                self.process = subprocess.Popen([*keeper, *command], cwd=self.jobs, stderr=log, **options)
        self._buffer = b""
        self.loaded = {}
        try:
            self._send({"prelude": prelude})
            if self._line(timeout) != "ready":
                raise ServerGone(f"the server did not warm up: {self.log_tail()}")
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

    def _path(self, path):
        """``path`` (in the server's folder of jobs) as the server sees it."""
        return f"{confine.JOBS_FOLDER}/{path.name}" if self.level == "full" else str(path)

    def preload(self, name, probes):
        """The key under which the server holds ``probes`` (an exercise's), sending them the first time."""
        key = f"{name}-{id(probes)}"
        if key not in self.loaded:
            path = self.jobs / f"probes-{len(self.loaded)}.pt"
            torch.save(probes, path)
            os.chmod(path, 0o644)
            self._send({"preload": self._path(path), "key": key})
            if self._line(60.0) != "loaded":
                raise ServerGone(f"the server did not load the probes: {self.log_tail()}")
            path.unlink()
            self.loaded[key] = probes  # kept alive, so that no other object takes its id
        return key

    def start(self, jobdir):
        held = [str(place) for _, place in jail.python_under_tmp()] if self.level == "full" else []
        self._send({"name": jobdir.name, "path": str(jobdir), "python_in_tmp": held})
        line = self._line(30.0)
        if line != "started":
            raise ServerGone(f"the server did not start the job ({line!r}): {self.log_tail()}")
        return WarmJob(self)

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

    def __init__(self, server):
        self.server, self.returncode = server, None

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
        """Have the server kill the job's session (its namespace's PID 1 with it); wait for its status."""
        if self.returncode is not None:
            return
        with contextlib.suppress(ServerGone):
            self.server._send({"kill": True})
        deadline = time.monotonic() + 10
        while self.poll() is None and time.monotonic() < deadline:
            pass
        if self.returncode is None:  # a server that does not answer is not trusted with another job
            discard(self.server)
            self.returncode = -signal.SIGKILL


_SERVERS = {}
# At most this many per grading process, the least recently used closed first (batch grading takes
# the lessons in turn): each holds about 330 MB, 240 MB of it its own.
MAX_SERVERS = 3


def server_for(lesson, prelude, level, timeout=60.0):
    """A warm server for ``lesson`` (started now if none is alive), or None where one can't run."""
    key = (lesson.name, prelude, level)
    server = _SERVERS.get(key)
    if server is not None and not server.alive:
        discard(server)
        server = None
    if server is None:
        while len(_SERVERS) >= MAX_SERVERS:
            _SERVERS.pop(next(iter(_SERVERS))).close()
        try:
            from . import child_env

            server = WarmServer(lesson, prelude, level, child_env, timeout)
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
        confine.die_with_parent(signal.SIGTERM)
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

