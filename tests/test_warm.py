"""The warm grader: jobs forked from a server per lesson grade exactly as fresh interpreters do,
and nothing they start outlives them, even when the grader itself is killed mid-job."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder.curriculum import LESSONS
from autograder.grading import sandbox, warm
from autograder.grading.grade import grade
from autograder.lessons import source_notebook
from autograder.release import REPO
from bench.grading import submission
from tests.test_adversarial import lingering

pytestmark = pytest.mark.skipif(not (warm.warm_available() and sandbox.isolation_available()),
                                reason="needs Linux namespaces (root or unprivileged user namespaces)")


def _notebook(tmp_path, lesson, kind, index=0):
    release = nbformat.read(REPO / "lessons" / lesson / f"{lesson}.ipynb", as_version=4)
    source = nbformat.read(source_notebook(lesson), as_version=4)
    path = tmp_path / kind / lesson / f"{lesson}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(submission(release, source, lesson, kind, index), path)
    return path


@pytest.mark.parametrize("lesson, kind", [("01_self_attention", "stub"), ("04_encoder", "buggy"),
                                          ("07_language_model", "correct"), ("02_multi_head_attention", "hostile")])
def test_a_warm_job_grades_as_a_fresh_interpreter_does(tmp_path, monkeypatch, lesson, kind):
    path = _notebook(tmp_path, lesson, kind, index=3)
    warm_grade = grade(path).as_dict()
    assert warm._SERVERS, "no warm server was started: the test compares nothing"
    monkeypatch.setenv("AUTOGRADER_WARM", "0")
    assert not warm.warm_available()
    cold_grade = grade(path).as_dict()
    assert warm_grade == cold_grade


def test_a_server_that_died_is_replaced_and_one_that_fails_falls_back_to_a_fresh_interpreter(tmp_path, monkeypatch):
    path = _notebook(tmp_path, "01_self_attention", "correct")
    assert grade(path).score == LESSONS["01_self_attention"].max_score
    for server in list(warm._SERVERS.values()):
        server.process.kill()
        server.process.wait()
    assert grade(path).score == LESSONS["01_self_attention"].max_score

    def gone(self, jobdir, script):
        raise warm.ServerGone("the server did not start the job")

    monkeypatch.setattr(warm.WarmServer, "start", gone)
    assert grade(path).score == LESSONS["01_self_attention"].max_score


def _processes(predicate):
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and predicate(proc):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_killing_the_grader_mid_job_leaves_no_process_behind(tmp_path):
    marker = "7391.75"
    path = _notebook(tmp_path, "01_self_attention", "correct")
    notebook = nbformat.read(path, as_version=4)
    cell = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "scaled_dot_product_attention")
    cell.source += ("\nimport subprocess\n"
                    f"subprocess.Popen(['sleep', {marker!r}], start_new_session=True)\n"
                    "while True:\n    pass\n")
    nbformat.write(notebook, path)
    grader = subprocess.Popen([sys.executable, "-m", "autograder", "grade", str(path), "--timeout", "120"],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not lingering(marker, grace=0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lingering(marker, grace=0), "the student's sleeper never started: the test would prove nothing"
        servers = _processes(lambda p: f"{warm.PARENT_VARIABLE}={grader.pid}".encode() in (p / "environ").read_bytes())
        assert servers, "the grader started no warm server"
        # The server's working folder is its own; its forks' (which share its environment) are the job's.
        every_folder = {Path(os.readlink(f"/proc/{pid}/cwd")) for pid in servers} - {Path("/")}
        folders = [folder for folder in every_folder if folder.name.startswith("autograder-warm-")]
        # The killed grader's own temporary folder (the job's parent) is left behind: removed below.
        runs = {folder.parent for folder in every_folder if folder.name.startswith("job")}
        assert folders, "no server works in a folder of its own"
    finally:
        grader.send_signal(signal.SIGKILL)
        grader.wait()
    assert lingering(marker) == [], "the student's process outlived the killed grader"
    deadline = time.monotonic() + 5
    while (left := [pid for pid in servers if os.path.exists(f"/proc/{pid}")]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, "the warm server outlived the killed grader"
    assert not [folder for folder in folders if folder.exists()], "the warm server's folder outlived it"
    for run in runs:
        shutil.rmtree(run, ignore_errors=True)


def test_a_server_runs_only_the_imports_of_the_setup_cell_it_is_given(tmp_path):
    """The setup cell may come from a submission (a course without the lesson's notebook): the
    server, which runs outside the sandbox, imports what it imports and runs nothing else of it."""
    marker = tmp_path / "the setup cell ran in the server"
    prelude = f"import math\nfrom pathlib import Path\nPath({str(marker)!r}).write_text('outside the sandbox')\n"
    assert warm._imports_of(prelude) == "import math\nfrom pathlib import Path"
    server = warm.WarmServer(LESSONS["01_self_attention"], prelude, sandbox._child_env)
    try:
        assert server.alive
        assert not marker.exists()
    finally:
        server.close()
    assert not server.root.exists(), "a closed server's folder is removed"
