"""The sandboxed child: run the student's cells, then their definitions on the given probes.

``python -m autograder.grading.child JOBDIR [--confine UID GID]``. With ``--confine`` (a fresh
child in the sandbox) it first drops to UID with no capability and the seccomp filter. It reads
``JOBDIR/job.pt`` (plain data), switches each exercise's forbidden built-ins off for good before
checking it, records
each step it starts and finishes in ``JOBDIR/progress``, and writes plain results to
``JOBDIR/out/``. It imports nothing that knows the answers.
"""

import contextlib
import linecache
import signal
import sys
from pathlib import Path

import torch

from ..checks.forbidden import block_for_good, switched_off
from ..checks.runner import _describe, run_probes, swapped


def _exec_cell(source, name, namespace):
    filename = f"<cell {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


@contextlib.contextmanager
def _reference_callees(namespace, spec):
    """The reference's versions of the exercises this one calls, in the student's namespace for a
    while (one mistake costs one exercise); nothing when ``spec`` is None."""
    if not spec:
        yield
        return
    reference = {"__name__": "__reference_callees__"}
    exec(compile(spec["source"], "<reference callees>", "exec"), reference)
    with swapped(namespace, {name: reference[name] for name in spec["names"]}):
        yield


def _limit_memory(budget):
    """The kernel's limit on this process's data: what it holds now (torch, the probes' inputs, the setup
    cell's imports) plus ``budget`` bytes, for the answer cells and the checks. No student code has run
    yet, and the limit can only be lowered from here on."""
    import resource

    with open("/proc/self/status") as status:
        data = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
    limit = data + int(budget)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


# Probes a warm server loaded before forking this process (warm.py), by the key a job names them by.
PRELOADED = {}


def main(jobdir):
    # Python ignores SIGXFSZ, so a write past the sandbox's file-size limit would only raise
    # OSError in the student's code; with the default action the step stops, as the sandbox means.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    jobdir = Path(jobdir)
    job = torch.load(jobdir / "job.pt", weights_only=True)
    out = jobdir / "out"
    out.mkdir(exist_ok=True)
    progress = open(jobdir / "progress", "a", buffering=1)
    namespace = {"__name__": "__student__"}

    def save(name, value):
        torch.save(value, out / f"{name}.tmp")
        (out / f"{name}.tmp").replace(out / f"{name}.pt")

    try:
        _exec_cell(job["prelude"], "setup", namespace)
    except BaseException as exc:  # a broken prelude is the grader's problem, reported as such
        save("prelude", _describe(exc))
    forbidden = job.get("forbidden", {})
    everything_forbidden = sorted({name for names in forbidden.values() for name in names})
    if job.get("memory_budget"):
        _limit_memory(job["memory_budget"])
    for cell in job["cells"]:
        progress.write(f"start cell {cell['name']}\n")
        try:
            with switched_off(everything_forbidden):
                _exec_cell(cell["source"], cell["name"], namespace)
        except BaseException as exc:  # SystemExit too: a cell must not end the run
            save(f"cell-{cell['name']}", _describe(exc))
        progress.write(f"done cell {cell['name']}\n")
    # Each exercise's built-ins are refused for good (at PyTorch's dispatcher, past anything a cell can
    # switch off) before it is checked; those with fewest first, so that no exercise is checked with
    # another's refused (lesson 06's count_parameters counts an nn.Transformer, which Transformer's
    # check refuses).
    blocked = set()
    for exercise in sorted(job["exercises"], key=lambda e: len(forbidden.get(e["name"], ()))):
        own = set(forbidden.get(exercise["name"], ())) - blocked
        block_for_good(sorted(own))
        blocked |= own
        name = exercise["name"]
        progress.write(f"start exercise {name}\n")
        obj = namespace.get(name)
        with switched_off(forbidden.get(name, ())), _reference_callees(namespace, exercise.get("callees")):
            probes = exercise["probes"] if "probes" in exercise else PRELOADED[exercise["probes_key"]]
            results = None if obj is None else run_probes(obj, probes)
        save(f"exercise-{name}", {"defined": obj is not None, "results": results})
        progress.write(f"done exercise {name}\n")
    progress.close()


if __name__ == "__main__":
    if sys.argv[2:3] == ["--confine"]:
        from .sandbox import confine

        confine.drop_privileges(int(sys.argv[3]), int(sys.argv[4]), confine.seccomp_filter())
    main(sys.argv[1])
