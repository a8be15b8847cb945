"""Run student code in a child process with time and memory limits, and read back plain data.

The parent never imports or executes what the student wrote. It hands the child a job
(prelude, answer cells, probes), watches the child's progress file, kills the child when a
step overruns its time, and starts a new child for the steps that remain, so that an
infinite loop or a crash costs only the step it happened in. On Linux each child is a fork of a
warm server that has imported torch and the lesson once (warm.py); elsewhere, or when no server
can run, a fresh interpreter.
"""

import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..release import REPO, write_student_package
from . import warm

# Memory the child may allocate (RLIMIT_DATA: heap and private writable mappings, which is
# where tensors live). Not RLIMIT_AS, the address space: CUDA reserves tens of GiB of address
# space it never writes, and would fail to start under an address-space limit.
MEMORY_LIMIT_BYTES = 8 * 2**30
OUTPUT_LIMIT_BYTES = 64 * 2**20  # largest file the child may write (its stdout included)


@dataclass(frozen=True)
class Isolation:
    """What the sandbox could give student code on this machine. ``level``: "full" (an unprivileged
    uid in its own namespaces, no capabilities, a seccomp filter), "user" (only a separate,
    unprivileged uid that cannot read the course) or "none" (student code runs as the grader's
    own user, beside the course); ``description`` says it in a sentence for grade reports."""

    level: str
    description: str


def isolation():
    """The isolation that jobs get here (computed once)."""
    if isolation_available():
        return Isolation("full", "full: own mount, network and PID namespaces")
    return Isolation("none", "none: student code runs as the grader's user, beside the course")


@dataclass
class SandboxOutcome:
    cell_errors: dict = field(default_factory=dict)  # cell name -> error description
    results: dict = field(default_factory=dict)  # exercise -> list of runner results, or None if undefined
    failures: dict = field(default_factory=dict)  # step ("cell X" / "exercise Y") -> why it didn't finish
    isolated: bool = False  # whether the children ran without the course's files and the network
    isolation: Isolation = None  # what the children got (isolation())


def _limit_resources():
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _child_env(package_dir):
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")}
    env.update(PYTHONPATH=str(package_dir), PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONHASHSEED="0", MPLBACKEND="Agg")
    return env


# New mount, network and PID namespaces, with a /proc of the new PID namespace: the child sees
# no other process, so it can neither signal the grader nor reach the grader's files through
# /proc/<pid>/root, which leads past the mount namespace.
_UNSHARE = ("unshare", "--mount", "--net", "--pid", "--fork", "--mount-proc")


@functools.lru_cache(maxsize=None)
def isolation_available():
    """Whether this machine lets the grader start a child in its own mount, network and PID namespaces."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    try:
        probe = subprocess.run([*_UNSHARE, "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _mount_script(workdir, hide=(), keep=(), proc=False):
    """The shell commands that, in a new mount namespace, replace the course folder, the folders in
    ``hide`` (a class's course folder, say) and the temporary folder (other students' grading
    jobs) by empty ones, except for ``workdir`` (the job's folder), the folders in ``keep`` (the
    student package) and the Python environment, which are mounted back where they were; then
    make every folder but ``workdir`` and the empty temporary folder read-only. With ``proc``, a
    /proc of the new PID namespace is mounted first (what ``unshare --mount-proc`` does)."""
    tmp, env = Path(workdir), Path(sys.prefix)
    hidden_tmp = Path(tempfile.gettempdir())
    hidden = []
    for folder in (REPO, *map(Path, hide)):
        folder = folder.resolve()
        if folder not in hidden and hidden_tmp not in folder.parents and folder != hidden_tmp and folder != Path("/"):
            hidden.append(folder)
    # An empty tmpfs that stays visible to hold this job's folder while the rest is hidden: a
    # hidden folder itself, or /mnt when all of them lie in the temporary folder (a student bundle).
    stash = hidden[0] if hidden else Path("/mnt")
    q = shlex.quote
    covered = [*hidden, hidden_tmp]
    kept = [Path(folder) for folder in keep]
    if any(folder == env or folder in env.parents for folder in covered):
        kept.append(env)
    steps = ["mount --make-rprivate /"]
    if proc:
        steps.append("mount -t proc -o nosuid,nodev,noexec proc /proc")
    # Each kept folder rides inside the job's folder while everything around it is covered.
    for i, folder in enumerate(kept):
        steps += [f"mkdir -p {q(str(tmp / f'.keep{i}'))}", f"mount --rbind {q(str(folder))} {q(str(tmp / f'.keep{i}'))}"]
    steps += [
        f"mount -t tmpfs -o size=1m,mode=755 none {q(str(stash))}",
        f"mkdir -p {q(str(stash / '.job'))}",
        f"mount --rbind {q(str(tmp))} {q(str(stash / '.job'))}",
    ]
    steps += [f"mount -t tmpfs -o size=1m,mode=755 none {q(str(folder))}" for folder in hidden if folder != stash]
    if hidden_tmp in tmp.parents:
        steps += [f"mount -t tmpfs -o mode=1777 none {q(str(hidden_tmp))}", f"mkdir -p {q(str(tmp))}",
                  f"mount --rbind {q(str(stash / '.job'))} {q(str(tmp))}"]
    for i, folder in enumerate(kept):
        steps += [f"mkdir -p {q(str(folder))}", f"mount --rbind {q(str(tmp / f'.keep{i}'))} {q(str(folder))}"]
    # A /dev/shm of its own: the machine's is shared by every process on it. Then everything else
    # read-only: the Python environment, the student package (one copy serves every job of a warm
    # server), the home folder. Only the job's folder and the empty temporary folder take writes
    # (and /proc, /dev, /sys, which are what they are). The root must succeed; a mount that refuses
    # (a special file system) stays as it was. A process's working folder, entered before these
    # mounts, is the read-only one underneath: the job enters its folder again.
    writable = " | ".join(q(str(path)) for path in (tmp, hidden_tmp))
    steps += ["if [ -d /dev/shm ]; then mount -t tmpfs -o mode=1777,size=256m none /dev/shm; fi",
              "mount -o remount,bind,ro /",
              "for m in $(awk '$5 != \"/\" {print $5}' /proc/self/mountinfo); do case \"$m\" in /proc | /proc/* | /dev | "
              f"/dev/* | /sys | /sys/* | {writable}) ;; *) mount -o remount,bind,ro \"$m\" 2>/dev/null ;; esac; done; true"]
    return " && ".join(steps)


def _isolated(command, workdir, hide=(), keep=()):
    """``command`` wrapped so that it runs with no network, sees no other process, and finds the
    files hidden as ``_mount_script`` says."""
    # Not exec'd: the shell stays PID 1 of the namespace, since a PID 1 ignores the signals it has
    # no handler for (os.abort() wouldn't end it), and reports a child killed by signal N as exit
    # status 128 + N (see _death).
    q = shlex.quote
    script = (_mount_script(workdir, hide, keep) + f" && cd {q(str(workdir))} && " + " ".join(q(part) for part in command)
              + "; exit $?")
    return [*_UNSHARE, "--", "sh", "-c", script]


def _progress(jobdir):
    try:
        lines = (jobdir / "progress").read_text().splitlines()
    except FileNotFoundError:
        return None, set()
    done = {line[5:] for line in lines if line.startswith("done ")}
    started = [line[6:] for line in lines if line.startswith("start ")]
    current = next((s for s in reversed(started) if s not in done), None)
    return current, done


def _load(path):
    try:
        return torch.load(path, weights_only=True)
    except Exception as exc:  # a result the child couldn't or wouldn't write as plain data
        return {"unreadable": f"{exc.__class__.__name__}"}


NOT_PLAIN = "returned something that is not plain tensor data"


def _exercise_results(data, probes):
    """(results, None) from an exercise's file, else (None, why they can't be used).

    The file is written by a process where student code ran, so it may be anything a
    weights-only load accepts: only a list of one result per probe is compared.
    """
    if not isinstance(data, dict) or "unreadable" in data or "results" not in data:
        return None, NOT_PLAIN
    results = data["results"]
    if results is None:  # the exercise wasn't defined
        return None, None
    if not isinstance(results, list) or not all(isinstance(result, dict) for result in results):
        return None, NOT_PLAIN
    if len(results) != len(probes):
        return None, (f"returned {len(results)} results for {len(probes)} checks, which don't match the checks "
                      "that were run (was the grader's code changed?)")
    return results, None


def _cell_error(data):
    """A cell's error record as plain strings, whatever the file held."""
    if isinstance(data, dict) and all(isinstance(data.get(key, ""), str) for key in ("type", "message", "traceback")) \
            and data.get("type"):
        return data
    return {"type": "an error", "message": "its record is not plain data", "traceback": ""}


def run(lesson, prelude, cells, exercises, step_timeout=60.0, startup_timeout=60.0, isolate=None, forbidden=None,
        hide=(), callees=None, use_warm=None):
    """Run ``cells`` ({name: source}) then each exercise's probes ({name: probes}) in children.

    The children import only what a student of ``lesson`` may have (autograder.release);
    with ``isolate`` (the default where the OS allows) they also see neither the course's
    files nor other grading jobs nor other processes, and have no network. ``forbidden`` ({exercise: names}) are
    the torch built-ins switched off while the cells run and while each exercise is checked;
    ``hide`` names more folders the children must not see (the course the submission is in).
    ``callees`` ({exercise: {"names": [...], "source": reference source}}) are the reference
    versions of the exercises an exercise calls: each such exercise is checked in a child of its
    own, after the others, with them standing in for the student's, so that no other exercise's
    check ever runs in a child that holds reference code.

    With ``use_warm`` (the default on Linux) each child is a fork of the lesson's warm server
    (warm.py), which has imported torch and the lesson's setup once, instead of a fresh
    interpreter; isolation and limits are the same.
    """
    outcome = SandboxOutcome()
    outcome.isolated = isolation_available() if isolate is None else isolate
    outcome.isolation = isolation() if outcome.isolated else Isolation("none", "none: isolation switched off")
    callees = {name: spec for name, spec in (callees or {}).items() if name in exercises and spec.get("names")}
    skipped_cells = set()
    server = None
    if warm.warm_available() if use_warm is None else use_warm:
        server = warm.server_for(lesson, prelude, _child_env, startup_timeout)
    with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
        attempts = iter(range(10**6))

        def launch(jobdir, job, remaining, callee_spec):
            """Write the job and start it in a fork of the warm server, with the probes the server
            already holds named by key; else (no server, or it is gone) in a fresh interpreter."""
            nonlocal server
            if server is not None:
                try:
                    torch.save({**job, "exercises": [{"name": n, "probes_key": server.preload(n, p), "callees": callee_spec}
                                                     for n, p in remaining.items()]}, jobdir / "job.pt")
                    script = _mount_script(jobdir, hide, [server.package], proc=True) if outcome.isolated else None
                    return server.start(jobdir, script)
                except warm.ServerGone:
                    warm.discard(server)
                    server = None
            package = Path(tmp) / "package"
            if not package.exists():  # the first fresh interpreter of this run writes it
                write_student_package(lesson, package)
            torch.save({**job, "exercises": [{"name": n, "probes": p, "callees": callee_spec}
                                             for n, p in remaining.items()]}, jobdir / "job.pt")
            return _ColdChild(jobdir, package, outcome.isolated, hide)

        def run_children(remaining, callee_spec=None):
            for _ in range(len(cells) + len(remaining) + 1):
                if not remaining:
                    return
                jobdir = Path(tmp) / f"job{next(attempts)}"
                jobdir.mkdir()
                job_cells = [{"name": n, "source": s} for n, s in cells.items() if n not in skipped_cells]
                job = {"prelude": prelude, "cells": job_cells, "forbidden": dict(forbidden or {})}
                failed_step = _supervise(jobdir, lambda: launch(jobdir, job, remaining, callee_spec), step_timeout,
                                         startup_timeout)
                out = jobdir / "out"
                for path in sorted(out.glob("cell-*.pt")) if out.exists() else []:
                    outcome.cell_errors.setdefault(path.stem[5:], _cell_error(_load(path)))
                # A child that stopped in a cell (or before any step) checked no exercise: a result
                # file there was written by a cell, not by the checks, and is not read.
                checked = failed_step is None or failed_step[0].startswith("exercise ")
                for name in list(remaining) if checked else []:
                    path = out / f"exercise-{name}.pt"
                    if path.exists():
                        results, why = _exercise_results(_load(path), remaining[name])
                        if why:
                            outcome.failures[f"exercise {name}"] = why
                        else:
                            outcome.results[name] = results
                        del remaining[name]
                # Gone before the next job starts: a job sees no other job's files (a callee's
                # reference source among them).
                shutil.rmtree(jobdir, ignore_errors=True)
                if failed_step is None:
                    return
                step, why = failed_step
                outcome.failures[step] = why
                kind, _, name = step.partition(" ")
                if kind == "cell":
                    skipped_cells.add(name)
                elif kind == "exercise":
                    remaining.pop(name, None)
                else:  # the child died before any step: nothing more can be learnt
                    for name in remaining:
                        outcome.failures[f"exercise {name}"] = why
                    return

        run_children({n: p for n, p in exercises.items() if n not in callees})
        for name, spec in callees.items():
            run_children({name: exercises[name]}, spec)
        shutil.rmtree(tmp, ignore_errors=True)
    return outcome


class _ColdChild:
    """A fresh interpreter for one job, watched as a warm job is: ``wait(seconds)`` and ``kill()``."""

    def __init__(self, jobdir, package_dir, isolate, hide):
        command = [sys.executable, "-m", "autograder.grading.child", str(jobdir)]
        if isolate:
            command = _isolated(command, jobdir, hide, [package_dir])
        with open(jobdir / "stdout", "wb") as stdout:
            self.process = subprocess.Popen(
                command, cwd=jobdir, env=_child_env(package_dir), stdin=subprocess.DEVNULL, stdout=stdout,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_limit_resources if os.name == "posix" else None,
            )

    def wait(self, seconds):
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _supervise(jobdir, launch, step_timeout, startup_timeout):
    """Run one job (``launch()`` starts it); return None when it finished every step, else (step,
    why it stopped)."""
    child = launch()
    step, since = None, time.monotonic()
    code = None
    try:
        while True:
            current, done = _progress(jobdir)
            if current != step:
                step, since = current, time.monotonic()
            if code is not None:
                if current is None and code == 0:
                    return None
                return (current or "startup", _death(code))
            limit = step_timeout if step is not None else startup_timeout
            if time.monotonic() - since > limit:
                return (step or "startup", f"did not finish within {limit:g} s (an infinite loop?)")
            code = child.wait(0.02)
    finally:
        if code is None:
            child.kill()


def _death(code):
    if code > 128 and code - 128 in signal.valid_signals():  # the isolated child's shell saw a signal
        code = 128 - code
    if code < 0:
        name = signal.Signals(-code).name
        if -code == signal.SIGXFSZ:
            return "stopped: it wrote more output than allowed"
        return f"the process was killed by {name} (a crash, or memory exhausted)"
    return f"the process exited (exit code {code}) before finishing: don't call exit() or os._exit()"
