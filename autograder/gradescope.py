"""Grading on Gradescope: one container per submission instead of one machine for the class.

Two halves. ``build_zip`` (``make gradescope LESSON=01``, here) writes the autograder zip that
Gradescope builds its image from: ``setup.sh``, ``run_autograder``, the grader's requirements,
and the part of this package that grading the lesson needs: the student's subset of the
package (what the sandbox imports), the lesson's hidden checks, and the reference of the
lessons up to and including this one (the hidden checks compare with it). No solution notebook
and no other lesson's checks go in. ``grade_submission`` (``python -m autograder.gradescope
LESSON``, which ``run_autograder`` calls in the container) grades the notebook in
``$AUTOGRADER_ROOT/submission/`` with the trusted grader and writes
``$AUTOGRADER_ROOT/results/results.json`` in Gradescope's format
(https://gradescope-autograders.readthedocs.io/en/latest/specs/).
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

from .curriculum import LESSONS, lessons_before
from .release import LESSON_TOOLS, PACKAGE, REPO, STUDENT_FILES, pinned_lines, reference_init, select_lessons

# What the grader's machine needs: torch and numpy for the checks, and what the lessons' setup
# cells import (matplotlib; tqdm through lesson 06's training code). Pinned as in requirements.txt.
GRADER_PACKAGES = ("torch", "numpy", "matplotlib", "tqdm")
# The grader's own modules beyond a student's subset: this file and the hidden checks' shared parts (every
# module of checks/hidden/ but the lessons' own, l<lesson>.py, of which the zip holds its lesson's alone, and
# the builder of the stored data).
GRADER_FILES = ("gradescope.py", *sorted(f"checks/hidden/{path.name}" for path in (PACKAGE / "checks" / "hidden").glob("*.py")
                                         if not re.match(r"l\d\d_", path.name) and path.name != "build_data.py"))
VISIBILITIES = ("visible", "after_published")
DEFAULT_ROOT = "/autograder"

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image. The course needs
# Python 3.11: pick the "Ubuntu 22.04" base image, whose archive has it (python3.11; its own
# python3 is 3.10). AUTOGRADER_SKIP_INSTALL=1 skips the installation (tests/test_gradescope.py,
# whose Python has it all); AUTOGRADER_TORCH_INDEX names another index for torch (a mirror).
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
if [ "${AUTOGRADER_SKIP_INSTALL:-}" = 1 ]; then
    echo "setup.sh: AUTOGRADER_SKIP_INSTALL=1, nothing installed"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
if ! command -v python3.11 >/dev/null; then
    apt-get install -y python3.11 python3.11-venv || {
        echo "setup.sh: this image has no Python 3.11; choose Gradescope's Ubuntu 22.04 base image" >&2; exit 1; }
fi
apt-get install -y python3.11-venv
python3.11 -m venv "$ROOT/venv"
# The containers have no GPU: the CPU build of torch is a fraction of the size.
"$ROOT/venv/bin/pip" install --no-cache-dir --index-url "${AUTOGRADER_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}" \\
    "$(grep '^torch==' "$ROOT/source/requirements.txt")"
"$ROOT/venv/bin/pip" install --no-cache-dir -r "$ROOT/source/requirements.txt"
"$ROOT/venv/bin/python" -c "import sys, torch; print('setup.sh: Python', sys.version.split()[0], 'torch', torch.__version__)"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission, from /autograder (it copies this file there).
# AUTOGRADER_ROOT moves that folder and AUTOGRADER_PYTHON names the Python (tests).
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
PYTHON="${{AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}}"
cd "$ROOT/source" && exec "$PYTHON" -m autograder.gradescope {lesson} --visibility {visibility}
"""


def resolve_lesson(name):
    """The Lesson a name, a number (01) or a notebook's path (lessons/01_x/01_x.ipynb) stands for."""
    stem = Path(name).stem if name.endswith(".ipynb") else name
    (lesson,) = select_lessons([stem])
    return lesson


def _copy(relative, root):
    """Copy the repository's file ``relative`` to the same place under ``root``."""
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / relative, root / relative)


def write_autograder(lesson, root, visibility="visible"):
    """Under ``root``: what the zip holds for ``lesson`` (the folder Gradescope calls source/)."""
    root = Path(root)
    package = PACKAGE.relative_to(REPO)
    graded = lessons_before(lesson) + [lesson]
    for relative in STUDENT_FILES + GRADER_FILES + (f"checks/hidden/l{lesson.name}.py",):
        _copy(package / relative, root)
    for path in sorted(LESSON_TOOLS.glob("*.py")):  # lesson 07's reference imports its tokenizer from there
        _copy(path.relative_to(REPO), root)
    for other in graded:
        _copy(package / "reference" / f"{other.reference_module}.py", root)
        if (PACKAGE / "checks" / "data" / f"{other.name}.pt").exists():
            _copy(package / "checks" / "data" / f"{other.name}.pt", root)
    (root / package / "reference" / "__init__.py").write_text(reference_init(graded))
    for relative in lesson.data_files:  # the text lessons 07 and 08 read, lesson 09's checkpoint
        _copy(relative, root)
    # The lesson's student notebook, for its setup cell (the grader runs the course's, not the student's).
    _copy(f"lessons/{lesson.name}/{lesson.name}.ipynb", root)
    (root / "requirements.txt").write_text(
        "# What grading needs, pinned as in the course's requirements.txt.\n" + "\n".join(pinned_lines(GRADER_PACKAGES)) + "\n")
    (root / "setup.sh").write_text(SETUP_SH)
    (root / "run_autograder").write_text(RUN_AUTOGRADER.format(lesson=lesson.name, visibility=visibility))
    for script in ("setup.sh", "run_autograder"):
        (root / script).chmod(0o755)
    return root


def build_zip(name, dest="gradescope", visibility="visible"):
    """``dest/<lesson>.zip``: the autograder to upload to Gradescope for the lesson ``name``."""
    lesson = resolve_lesson(name)
    if not (REPO / "lessons" / lesson.name / f"{lesson.name}.ipynb").exists():
        raise ValueError(f"lessons/{lesson.name}/{lesson.name}.ipynb does not exist yet (make lessons)")
    if visibility not in VISIBILITIES:
        raise ValueError(f"visibility must be one of {', '.join(VISIBILITIES)}")
    archive = Path(dest) / f"{lesson.name}.zip"
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = write_autograder(lesson, tmp, visibility)
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                info = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = (path.stat().st_mode & 0o777 | 0o100000) << 16  # keep the scripts executable
                info.compress_type = zipfile.ZIP_DEFLATED
                bundle.writestr(info, path.read_bytes())
    return archive


# --- In the container: grade one submission into results.json ---


def find_notebook(submission, lesson):
    """(the notebook to grade, why not others): ``<lesson>.ipynb`` if submitted, else the first by name."""
    notebooks = sorted(p for p in Path(submission).rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    if not notebooks:
        return None, ""
    named = [p for p in notebooks if p.name == f"{lesson.name}.ipynb"]
    chosen = (named or notebooks)[0]
    others = [p.name for p in notebooks if p != chosen]
    return chosen, f" (also submitted, not graded: {', '.join(others)})" if others else ""


# The messages are plain text whose probe lines are indented: shown as they are, not as HTML.
OUTPUT_FORMAT = {"output_format": "text", "test_output_format": "text"}


def _test(number, exercise, score, messages, visibility):
    return {"name": exercise.name, "number": str(number), "score": round(score, 2), "max_score": exercise.points,
            "status": "passed" if score >= exercise.points else "failed", "output": "\n".join(messages),
            "output_format": "text", "visibility": visibility}


def _not_graded(lesson, why):
    """Results for a submission that can't be graded: 0 for each exercise, the reason shown at once
    (visible whatever the instructor chose, so that the student can resubmit before the deadline)."""
    tests = [_test(i, e, 0, [f"not graded: {why}"], "visible") for i, e in enumerate(lesson.exercises, 1)]
    return {"score": 0, "output": why, "visibility": "visible", "stdout_visibility": "hidden", "tests": tests,
            **OUTPUT_FORMAT}


def results_for(submission, lesson, visibility="visible"):
    """The results.json document for the submission folder ``submission``."""
    from .grading.notebook import SubmissionError, read_notebook

    notebook, also = find_notebook(submission, lesson)
    if notebook is None:
        return _not_graded(lesson, f"No notebook (.ipynb) was submitted: upload your {lesson.name}.ipynb.")
    try:
        read_notebook(notebook)  # a file that is no notebook is told so before torch loads (seconds)
        from .grading.grade import grade

        result = grade(notebook, hidden=True, lesson_name=lesson.name)
    except SubmissionError as exc:
        return _not_graded(lesson, f"{notebook.name} could not be graded: {str(exc).split(': ', 1)[-1]}. "
                                   f"Upload the notebook of {lesson.name} ({lesson.title}), saved from Jupyter.")
    tests = [_test(i, e, result.exercises[e.name].score, result.exercises[e.name].messages, visibility)
             for i, e in enumerate(lesson.exercises, 1)]
    summary = (f"Graded {notebook.name}{also} as {lesson.name} ({lesson.title}): {result.score:g} / {result.max:g}. "
               "Each exercise is checked on the public checks of your notebook and on hidden ones of the "
               f"same requirements (other sizes, dtypes and seeds).\nIsolation of your code: {result.isolation}")
    return {"score": round(result.score, 2), "output": summary, "visibility": visibility,
            "stdout_visibility": "hidden", "tests": tests, "extra_data": {"isolation": result.isolation}, **OUTPUT_FORMAT}


def write_results(results, path):
    """Write results.json whole, replacing whatever is there (a submission's code may have written
    one while it ran; this runs after every child of the grader has ended)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(results, indent=2, ensure_ascii=False))
    os.replace(partial, path)


def grade_submission(lesson_name, visibility="visible", root=None):
    """Grade ``<root>/submission`` into ``<root>/results/results.json``; root: $AUTOGRADER_ROOT or /autograder."""
    root = Path(root or os.environ.get("AUTOGRADER_ROOT", DEFAULT_ROOT))
    lesson = LESSONS[lesson_name]
    started = time.monotonic()
    try:
        results = results_for(root / "submission", lesson, visibility)
    except Exception:  # a fault of the grader, not of the student: say so, and keep the trace for the instructor
        traceback.print_exc()
        results = _not_graded(lesson, "The grader failed on this submission (not your fault): "
                                      "tell your instructor, who can see what happened and regrade it.")
    results["execution_time"] = round(time.monotonic() - started)
    write_results(results, root / "results" / "results.json")
    print(f"{lesson.name}: {results['score']} / {lesson.max_score}")
    if "isolation" in results.get("extra_data", {}):  # for the instructor: stdout is hidden from students
        print(f"  isolation: {results['extra_data']['isolation']}")
    for test in results["tests"]:
        print(f"  {test['name']}: {test['score']} / {test['max_score']}")
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder.gradescope",
                                     description="grade $AUTOGRADER_ROOT/submission into results/results.json")
    parser.add_argument("lesson", choices=sorted(LESSONS))
    parser.add_argument("--visibility", choices=VISIBILITIES, default="visible")
    args = parser.parse_args(argv)
    grade_submission(args.lesson, args.visibility)
    return 0


if __name__ == "__main__":
    sys.exit(main())
