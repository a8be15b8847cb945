"""Run student code in a sandbox with time and memory limits, and read back plain data.

The parent never imports or executes what the student wrote. It hands a child a job (prelude,
answer cells, probes), watches the child's progress file, kills the child when a step overruns its
time, and starts a new child for the steps that remain, so that an infinite loop or a crash costs
only the step it happened in. Where the child runs and with what privilege is jail.py's and
confine.py's business (bubblewrap's namespaces, an unprivileged uid, no capabilities, seccomp); on
Linux each child is a fork of a warm server that has imported torch and the lesson once (warm.py),
elsewhere, or when no server can run, a fresh interpreter. What comes back is read by readback.py.
"""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ...release import write_student_package
from . import confine, jail, readback, warm
from .jail import Isolation

# Memory the child may allocate, 4 GiB: ten times what any lesson's checks use, and reached in seconds by code
# that writes what it allocates (RLIMIT_DATA: heap and private writable mappings, which is
# where tensors live). Not RLIMIT_AS, the address space: CUDA reserves tens of GiB of address
# space it never writes, and would fail to start under an address-space limit.
MEMORY_LIMIT_BYTES = 4 * 2**30
OUTPUT_LIMIT_BYTES = 64 * 2**20  # largest file the child may write (its stdout included)


def isolation():
    """What isolation jobs get on this machine (jail.Isolation)."""
    return jail.isolation()


def isolation_available():
    """Whether jobs run in bubblewrap's namespaces here."""
    return isolation().level == "full"


@dataclass
class SandboxOutcome:
    cell_errors: dict = field(default_factory=dict)  # cell name -> error description
    results: dict = field(default_factory=dict)  # exercise -> list of runner results, or None if undefined
    failures: dict = field(default_factory=dict)  # step ("cell X" / "exercise Y") -> why it didn't finish
    isolated: bool = False  # whether the children ran in bubblewrap's namespaces
    isolation: Isolation = None  # what the children got


def _limit_resources():
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def child_env(package_dir, level="none"):
    """The environment of a job: the student package on the path (where the sandbox mounts it), one thread,
    and a home and temporary folder that are the job's own."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "SYSTEMROOT")}
    if level == "full":
        env.update(PYTHONPATH=jail.PACKAGE_FOLDER, HOME="/tmp", TMPDIR="/tmp")
    else:
        env.update(PYTHONPATH=str(package_dir), HOME=os.environ.get("HOME", "/tmp"))
        if "TMPDIR" in os.environ:
            env["TMPDIR"] = os.environ["TMPDIR"]
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONHASHSEED="0", MPLBACKEND="Agg", MPLCONFIGDIR=env["HOME"] + "/.matplotlib")
    return env


def make_job_folder(path, level):
    """The folder of one job, which only the job's uid (and the grader) may use. Its name ends in a random
    part: at the ``user`` level, where jobs share a uid and a file system, no job can guess another's."""
    path = path.with_name(f"{path.name}-{secrets.token_hex(8)}")
    path.mkdir(mode=0o700)
    if level in ("full", "user") and os.geteuid() == 0:
        uid, gid = jail.job_ids()
        os.chown(path, uid, gid)
    return path


def open_to_jobs(folder):
    """Let the sandbox's uid enter ``folder`` (made by mkdtemp, 0700) without listing it."""
    os.chmod(folder, 0o711)


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
        return readback.load(path)
    except readback.Unreadable as exc:
        return {"unreadable": str(exc)}


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
    for result in results:
        if isinstance(result.get("error"), dict):
            result["error"] = {key: value[:readback.MESSAGE_LIMIT] if key == "message" and isinstance(value, str)
                               else value for key, value in result["error"].items()}
    return results, None


def _memory_budget(probes):
    """The largest ``memory_budget`` (bytes) among an exercise's probes, or None."""
    budgets = [probe["memory_budget"] for probe in probes if isinstance(probe, dict) and probe.get("memory_budget")]
    return max(budgets) if budgets else None


def run(lesson, prelude, cells, exercises, step_timeout=60.0, startup_timeout=60.0, isolate=None, forbidden=None,
        hide=(), callees=None, use_warm=None):
    """Run ``cells`` ({name: source}) then each exercise's probes ({name: probes}) in children.

    The children import only what a student of ``lesson`` may have (autograder.release), in the
    sandbox this machine allows (``isolation()``; ``isolate=False`` runs them without it, for
    comparisons). ``forbidden`` ({exercise: names}) are the torch built-ins switched off while the
    cells run and while each exercise is checked; ``hide`` names the course the submission is in,
    which a child never sees (at the ``full`` level it sees no folder it isn't given anyway).
    ``callees`` ({exercise: {"names": [...], "source": reference source}}) are the reference
    versions of the exercises an exercise calls: each such exercise is checked in a child of its
    own, after the others, with them standing in for the student's, so that no other exercise's
    check ever runs in a child that holds reference code. An exercise whose probes carry a
    ``memory_budget`` is checked in a child of its own too, whose memory limit the kernel enforces
    (the data it holds once its setup cell has run, plus the budget).

    With ``use_warm`` (the default on Linux) each child is a fork of the lesson's warm server
    (warm.py), which has imported torch and the lesson's setup once, instead of a fresh
    interpreter; isolation and limits are the same.
    """
    outcome = SandboxOutcome()
    outcome.isolation = isolation() if isolate is not False else Isolation("none", "none: isolation switched off")
    level = outcome.isolation.level
    outcome.isolated = level == "full"
    callees = {name: spec for name, spec in (callees or {}).items() if name in exercises and spec.get("names")}
    budgets = {name: _memory_budget(probes) for name, probes in exercises.items()}
    alone = [name for name in exercises if name in callees or budgets[name]]
    skipped_cells = set()
    server = None
    if warm.warm_available() if use_warm is None else use_warm:
        server = warm.server_for(lesson, prelude, level, startup_timeout)
    with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
        open_to_jobs(tmp)
        attempts = iter(range(10**6))

        def launch(job, remaining, callee_spec, budget):
            """Write the job and start it in a fork of the warm server, with the probes the server
            already holds named by key; else (no server, or it is gone) in a fresh interpreter."""
            nonlocal server
            job = {**job, "memory_budget": budget}
            if server is not None:
                jobdir = make_job_folder(server.jobs / f"job{next(attempts)}", level)
                try:
                    torch.save({**job, "exercises": [{"name": n, "probes_key": server.preload(n, p),
                                                      "callees": callee_spec} for n, p in remaining.items()]},
                               jobdir / "job.pt")
                    return jobdir, server.start(jobdir)
                except warm.ServerGone:
                    shutil.rmtree(jobdir, ignore_errors=True)
                    warm.discard(server)
                    server = None
            jobdir = make_job_folder(Path(tmp) / f"job{next(attempts)}", level)
            package = Path(tmp) / "package"
            if not package.exists():  # the first fresh interpreter of this run writes it
                write_student_package(lesson, package)
            torch.save({**job, "exercises": [{"name": n, "probes": p, "callees": callee_spec}
                                             for n, p in remaining.items()]}, jobdir / "job.pt")
            return jobdir, _ColdChild(jobdir, package, level)

        def run_children(remaining, callee_spec=None, budget=None):
            for _ in range(len(cells) + len(remaining) + 1):
                if not remaining:
                    return
                job_cells = [{"name": n, "source": s} for n, s in cells.items() if n not in skipped_cells]
                job = {"prelude": prelude, "cells": job_cells, "forbidden": dict(forbidden or {})}
                started = launch(job, remaining, callee_spec, budget)
                jobdir = started[0]
                failed_step = _supervise(jobdir, lambda: started[1], step_timeout, startup_timeout)
                out = jobdir / "out"
                # Only the files this job was asked for are read: a cell's error for each cell it ran,
                # an exercise's results for each exercise it checked.
                for cell in job_cells:
                    path = out / f"cell-{cell['name']}.pt"
                    if path.is_file() and not path.is_symlink():
                        outcome.cell_errors.setdefault(cell["name"], readback.cell_error(_load(path)))
                # A child that stopped in a cell (or before any step) checked no exercise: a result
                # file there was written by a cell, not by the checks, and is not read.
                checked = failed_step is None or failed_step[0].startswith("exercise ")
                for name in list(remaining) if checked else []:
                    path = out / f"exercise-{name}.pt"
                    if path.is_file() and not path.is_symlink():
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

        run_children({n: p for n, p in exercises.items() if n not in alone})
        for name in alone:
            run_children({name: exercises[name]}, callees.get(name), budgets[name])
        shutil.rmtree(tmp, ignore_errors=True)
    return outcome


class _ColdChild:
    """A fresh interpreter for one job, watched as a warm job is: ``wait(seconds)`` and ``kill()``."""

    def __init__(self, jobdir, package_dir, level):
        confined = ["--confine", *map(str, jail.job_ids())] if level in ("full", "user") else []
        options = dict(env=child_env(package_dir, level), stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                       start_new_session=True, preexec_fn=_limit_resources if os.name == "posix" else None)
        with open(jobdir / "stdout", "wb") as stdout:
            if level == "full":
                command = [sys.executable, "-m", "autograder.grading.child", confine.JOB_FOLDER, *confined]
                self.process = jail.popen(command, package_dir, job=jobdir, stdout=stdout, **options)
            else:
                command = [sys.executable, "-m", "autograder.grading.child", str(jobdir), *confined]
                self.process = subprocess.Popen(command, cwd=jobdir, stdout=stdout, **options)

    def wait(self, seconds):
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        jail.kill_group(self.process)


def _supervise(jobdir, launch, step_timeout, startup_timeout):
    """Run one job (``launch()`` gives it, started); return None when it finished every step, else (step,
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
