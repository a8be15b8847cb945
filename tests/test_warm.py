"""The warm grader: jobs forked from a server per lesson grade exactly as fresh interpreters do,
and nothing they start outlives them, even when the grader itself is killed mid-job."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from autograder.curriculum import LESSONS
from autograder.grading import sandbox
from autograder.grading.sandbox import warm
from autograder.grading.grade import grade
from autograder.lessons import source_notebook
from autograder.release import REPO
from bench.grading import submission
from tests.test_adversarial import lingering

# Under CI bubblewrap is installed (.ci/run), so these tests run there: none is skipped by a missing sandbox.
pytestmark = pytest.mark.skipif(not (warm.warm_available() and sandbox.isolation_available()) and not os.environ.get("CI"),
                                reason="needs bubblewrap and Linux namespaces (root or unprivileged user namespaces)")


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

    def gone(self, jobdir):
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
    started = time.time() - 1
    grader = subprocess.Popen([sys.executable, "-m", "autograder", "grade", str(path), "--timeout", "120"],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not lingering(marker, grace=0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lingering(marker, grace=0), "the student's sleeper never started: the test would prove nothing"
        # Each warm server runs under a keeper shell, the grader's child, whose arguments name its folder.
        keepers = _processes(lambda p: (p / "stat").read_text().split(") ")[1].split()[1] == str(grader.pid)
                             and b"keeper" in (p / "cmdline").read_bytes())
        assert keepers, "the grader started no warm server"
        servers = keepers + _processes(lambda p: int((p / "stat").read_text().split(") ")[1].split()[1]) in keepers)
        folders = [Path((Path(f"/proc/{pid}") / "cmdline").read_bytes().split(b"\0")[4].decode()) for pid in keepers]
        assert all(folder.name.startswith("autograder-warm-") and folder.exists() for folder in folders)
        # The killed grader's own temporary folder (the jobs of fresh interpreters) is left behind: removed below.
        runs = [folder for folder in Path(tempfile.gettempdir()).glob("autograder-*")
                if "-warm-" not in folder.name and folder.stat().st_mtime >= started]
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
    server, which holds privilege its jobs don't, imports what it imports and runs nothing else of it."""
    marker = tmp_path / "the setup cell ran in the server"
    prelude = f"import math\nfrom pathlib import Path\nPath({str(marker)!r}).write_text('outside the sandbox')\n"
    assert warm._imports_of(prelude) == "import math\nfrom pathlib import Path"
    server = warm.WarmServer(LESSONS["01_self_attention"], prelude, sandbox.isolation().level, sandbox.child_env)
    try:
        assert server.alive
        assert not marker.exists()
    finally:
        server.close()
    assert not server.root.exists(), "a closed server's folder is removed"
