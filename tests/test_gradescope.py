"""The Gradescope autograder: the zip holds what grading needs and nothing else, and it grades.

`make gradescope LESSON=01` writes gradescope/01_self_attention.zip. Here it is unpacked into a
throw-away folder laid out as Gradescope lays out /autograder (source/, submission/, results/,
run_autograder), its setup.sh runs with AUTOGRADER_SKIP_INSTALL=1 (the test's Python already has
every package the grader needs, and installing torch would take minutes and the network), and
its run_autograder grades a correct, a buggy, a stub, a hostile, a corrupt, a wrong-lesson and a
missing submission into results.json, checked against the fields Gradescope documents
(https://gradescope-autograders.readthedocs.io/en/latest/specs/).
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.curriculum import LESSONS
from autograder.gradescope import build_zip
from autograder.grading import sandbox
from autograder.lessons import REPO, source_notebook
from tests.adversarial import WRONG_SDPA_EARNS
from tests.nbcells import cell_with_id, solution_code

LESSON = LESSONS["01_self_attention"]
POINTS = {e.name: e.points for e in LESSON.exercises}
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}

BUGGY = '''\
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1)  # not divided by sqrt(d_k)
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
'''

# The buggy answer, then everything a notebook could do to its grader from inside: rebind the
# checks, make every comparison pass, and write a perfect results.json of its own (RESULTS is
# the results folder of the run; the marker file would show that the write went through).
HOSTILE = BUGGY + '''
import json, pathlib
import autograder.checks as checks
checks.check = check = lambda *args, **kwargs: None
try:
    import autograder.checks.hidden as hidden  # not in the sandbox: a student's package has no hidden checks
    hidden.check_hidden = lambda *args, **kwargs: None
except ImportError:
    pass
torch.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None
results = pathlib.Path(RESULTS)
(results / "results.json").write_text(json.dumps({"score": 1000, "tests": []}))
(results / "hostile-was-here").write_text("")
'''

SUBMISSIONS = {  # name: (answers, expected score per exercise)
    "correct": ("solution", POINTS),
    "buggy": (BUGGY, {"scaled_dot_product_attention": WRONG_SDPA_EARNS, "SelfAttention": POINTS["SelfAttention"]}),
    "stub": ("stubs", {name: 0 for name in POINTS}),
    "hostile": (HOSTILE, {"scaled_dot_product_attention": WRONG_SDPA_EARNS, "SelfAttention": POINTS["SelfAttention"]}),
}


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    return build_zip(LESSON.name, tmp_path_factory.mktemp("zip"))


def student_notebook(answers):
    """Lesson 01's student notebook with ``answers``: "solution", "stubs", or the source of the
    first answer cell (the rest solved)."""
    nb = nbformat.read(REPO / "lessons" / LESSON.name / f"{LESSON.name}.ipynb", as_version=4)
    source = nbformat.read(source_notebook(LESSON.name), as_version=4)
    if answers != "stubs":
        for name in POINTS:
            cell_with_id(nb, name).source = solution_code(cell_with_id(source, name).source)
        if answers != "solution":
            cell_with_id(nb, "scaled_dot_product_attention").source = answers
    return nb


def unpack(archive, root, env):
    """``root`` laid out as Gradescope lays out /autograder once it has built the image."""
    with zipfile.ZipFile(archive) as bundle:
        bundle.extractall(root / "source")
        for info in bundle.infolist():  # zipfile drops the permissions; Gradescope's unzip keeps them
            (root / "source" / info.filename).chmod(info.external_attr >> 16 & 0o777 or 0o644)
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    setup = subprocess.run(["bash", "setup.sh"], cwd=root / "source", env={**env, "AUTOGRADER_ROOT": str(root)},
                           capture_output=True, text=True, timeout=60)
    assert setup.returncode == 0, setup.stderr
    for folder in ("submission", "results"):
        (root / folder).mkdir()


CANNOT_BE_GRADED = {  # name: (files submitted, the reason results.json must give)
    "missing": ({}, "No notebook (.ipynb) was submitted"),
    "corrupt": ({f"{LESSON.name}.ipynb": b'{"cells": [trunc'}, "not a notebook"),
    "wrong lesson": ({"my_work.ipynb": nbformat.writes(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("def split_heads(x, num_heads):\n    return x")])).encode()}, "no answer cells"),
}


@pytest.fixture(scope="module")
def autograder_roots():
    """A folder per run, outside the temporary folder, as Gradescope's /autograder is: the sandbox
    hides the temporary folder, and makes every other one read-only, this one included."""
    base = Path(tempfile.mkdtemp(prefix="gradescope-test-", dir="/var/tmp" if Path("/var/tmp").is_dir() else None))
    yield lambda kind: Path(tempfile.mkdtemp(prefix=kind.replace(" ", "-") + "-", dir=base))
    shutil.rmtree(base, ignore_errors=True)


# Gradescope's containers are root without CAP_SYS_ADMIN: every submission is graded once so too (as root).
CONTAINERS = {"as root": (), "without CAP_SYS_ADMIN": ("setpriv", "--bounding-set", "-sys_admin", "--inh-caps",
                                                       "-sys_admin", "--")} if os.geteuid() == 0 else {"as is": ()}


@pytest.fixture(scope="module", params=list(CONTAINERS))
def graded(request, archive, autograder_roots):
    """{submission: its results.json}, each graded by run_autograder in a /autograder of its own.

    All at once, as Gradescope runs one container per submission: the file stays short on a busy machine.
    """
    wrapper = CONTAINERS[request.param]
    env = {**os.environ, "AUTOGRADER_PYTHON": sys.executable, "AUTOGRADER_SKIP_INSTALL": "1", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)  # the zip's package, not this checkout's
    roots = {kind: autograder_roots(kind) for kind in [*SUBMISSIONS, *CANNOT_BE_GRADED]}
    files = {kind: {f"{LESSON.name}.ipynb": nbformat.writes(student_notebook(
        answers.replace("RESULTS", repr(str(roots[kind] / "results"))))).encode()}
        for kind, (answers, _) in SUBMISSIONS.items()}
    files.update({kind: submitted for kind, (submitted, _) in CANNOT_BE_GRADED.items()})
    running = {}
    for kind, submitted in files.items():
        root = roots[kind]
        unpack(archive, root, env)
        for name, data in submitted.items():
            (root / "submission" / name).write_bytes(data)
        running[kind] = (root, subprocess.Popen([*wrapper, str(root / "run_autograder")], cwd=root,
                                                env={**env, "AUTOGRADER_ROOT": str(root)},
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = {}
    for kind, (root, process) in running.items():
        output, _ = process.communicate(timeout=600)
        assert process.returncode == 0, output
        results[kind] = json.loads((root / "results" / "results.json").read_text())
        results[kind]["written by the submission too"] = (root / "results" / "hostile-was-here").exists()
    return results


def assert_gradescope_format(results):
    """The fields Gradescope documents, with their types; the total is the sum of the tests."""
    assert set(results) <= {"score", "execution_time", "output", "output_format", "test_output_format",
                            "test_name_format", "visibility", "stdout_visibility", "extra_data", "tests",
                            "leaderboard"}, sorted(results)
    # The messages' probe lines are indented plain text: rendered as text, not run through HTML.
    assert results["output_format"] == results["test_output_format"] == "text"
    assert isinstance(results["score"], (int, float)) and isinstance(results["output"], str)
    assert results["visibility"] in VISIBILITIES and results["stdout_visibility"] in VISIBILITIES
    assert results["stdout_visibility"] == "hidden", "stdout is the instructor's (grader traces)"
    assert [test["name"] for test in results["tests"]] == list(POINTS)
    for test in results["tests"]:
        assert set(test) <= {"score", "max_score", "status", "name", "name_format", "number", "output",
                             "output_format", "tags", "visibility", "extra_data"}, sorted(test)
        assert 0 <= test["score"] <= test["max_score"] == POINTS[test["name"]]
        assert test["status"] in ("passed", "failed") and test["visibility"] in VISIBILITIES
        assert isinstance(test["output"], str) and test["output"]
    assert results["score"] == pytest.approx(sum(test["score"] for test in results["tests"]))


def test_the_zip_holds_what_grading_needs_and_nothing_else(archive):
    with zipfile.ZipFile(archive) as bundle:
        names = set(bundle.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in bundle.infolist()}
    assert {"setup.sh", "run_autograder", "requirements.txt", "autograder/gradescope.py",
            "autograder/checks/hidden/l01_self_attention.py", "autograder/reference/attention.py",
            "lessons/01_self_attention/01_self_attention.ipynb"} <= names, sorted(names)
    assert all(modes[script] & stat.S_IXUSR for script in ("setup.sh", "run_autograder"))
    assert not any(name.startswith(("solutions/", "tests/", "bench/")) for name in names), sorted(names)
    hidden = {name for name in names if "/hidden/l" in name}
    assert hidden == {"autograder/checks/hidden/l01_self_attention.py"}, "only this lesson's hidden checks"
    references = {name for name in names if name.startswith("autograder/reference/")}
    assert references == {"autograder/reference/__init__.py", "autograder/reference/attention.py"}
    assert [name for name in names if name.endswith(".ipynb")] == ["lessons/01_self_attention/01_self_attention.ipynb"]


@pytest.mark.parametrize("kind", list(SUBMISSIONS))
def test_a_submission_is_graded_into_results_json(graded, kind):
    _, expected = SUBMISSIONS[kind]
    results = dict(graded[kind])
    assert results.pop("written by the submission too") is False, "a write from the sandbox reached the results folder"
    assert_gradescope_format(results)
    assert {test["name"]: test["score"] for test in results["tests"]} == expected, results
    assert results["score"] == sum(expected.values())
    outputs = {test["name"]: test["output"] for test in results["tests"]}
    if kind in ("buggy", "hostile"):
        assert "not scaled" in outputs["scaled_dot_product_attention"], outputs
    if kind == "stub":
        assert all("not implemented" in output for output in outputs.values()), outputs
    if kind == "correct":
        assert all(test["status"] == "passed" for test in results["tests"])
    isolation = sandbox.isolation().description
    assert results["extra_data"]["isolation"] == isolation and f"Isolation of your code: {isolation}" in results["output"]


def test_setup_sh_updates_the_package_lists_and_installs_the_course_python(archive):
    with zipfile.ZipFile(archive) as bundle:
        setup = bundle.read("setup.sh").decode()
    commands = [line.strip() for line in setup.splitlines() if line.strip().startswith(("apt-get", "python3"))]
    assert commands[0] == "apt-get update", commands  # a fresh image's package lists are empty
    assert any(c.startswith("python3.11 -m venv") for c in commands), "the course pins Python 3.11"


@pytest.mark.parametrize("kind", list(CANNOT_BE_GRADED))
def test_a_submission_that_cannot_be_graded_gets_zero_and_a_reason(graded, kind):
    results, (_, why) = dict(graded[kind]), CANNOT_BE_GRADED[kind]
    results.pop("written by the submission too")
    assert_gradescope_format(results)
    assert results["score"] == 0 and why in results["output"], results["output"]
    assert results["visibility"] == "visible", "the student must see it at once, to resubmit"
    assert all(test["score"] == 0 and why in test["output"] for test in results["tests"])
