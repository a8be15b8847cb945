"""What a student of one lesson may have: the lesson, the public checks, earlier references.

The same subset of this package is what the grader's sandbox imports when it runs a
student's code (ARCHITECTURE.md: the reference of lesson N or later and the hidden checks
are in neither). ``python -m autograder release DEST`` (``make release``) writes one folder
per lesson: the student notebook, this subset, and the environment files.
"""

import shutil
from pathlib import Path

from .curriculum import LESSONS, lessons_before

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parent

# The package's own files a student may have: the public checks, the runner, the CLI's
# `check`, and lesson 06's training task (which uses no reference it isn't allowed). Everything else (reference/, checks/hidden/, solutions) is added selectively or never.
STUDENT_FILES = (
    "__init__.py", "__main__.py", "curriculum.py", "release.py", "reversal.py",
    "checks/__init__.py", "checks/runner.py", "checks/compare.py", "checks/properties.py",
    "checks/public.py", "checks/forbidden.py",
    "grading/__init__.py", "grading/child.py", "grading/grade.py", "grading/notebook.py", "grading/sandbox.py",
)
ENVIRONMENT_FILES = ("requirements.txt", "environment.yml")


def _reference_init(lessons):
    lines = ['"""The model answers of the lessons before this one, to build on."""', ""]
    names = []
    for lesson in lessons:
        exported = ", ".join(exercise.name for exercise in lesson.exercises)
        lines.append(f"from .{lesson.reference_module} import {exported}")
        names += [exercise.name for exercise in lesson.exercises]
    lines += ["", f"__all__ = {names!r}", ""]
    return "\n".join(lines)


def write_student_package(lesson, dest):
    """Write ``dest/autograder``: the package as a student of ``lesson`` may have it."""
    root = Path(dest) / "autograder"
    for relative in STUDENT_FILES:
        source = PACKAGE / relative
        if source.exists():  # a student package copies the subset it has itself
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, root / relative)
    earlier = lessons_before(lesson)
    for other in earlier + [lesson]:
        data = PACKAGE / "checks" / "data" / f"{other.name}.pt"
        if data.exists():
            (root / "checks" / "data").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(data, root / "checks" / "data" / data.name)
    if earlier:
        (root / "reference").mkdir(exist_ok=True)
        for other in earlier:
            shutil.copyfile(PACKAGE / "reference" / f"{other.reference_module}.py",
                            root / "reference" / f"{other.reference_module}.py")
        (root / "reference" / "__init__.py").write_text(_reference_init(earlier))
    return root


def build_release(dest, lessons_dir=REPO / "lessons"):
    """One folder per lesson under ``dest``: what a class receives for that lesson."""
    dest = Path(dest)
    built = []
    for lesson in LESSONS.values():
        notebook = Path(lessons_dir) / lesson.name / f"{lesson.name}.ipynb"
        if not notebook.exists():
            continue
        folder = dest / lesson.name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        shutil.copyfile(notebook, folder / notebook.name)
        write_student_package(lesson, folder)
        for name in ENVIRONMENT_FILES:
            shutil.copyfile(REPO / name, folder / name)
        (folder / "README.md").write_text(
            f"# {lesson.title}\n\n"
            f"Open `{notebook.name}` in JupyterLab from this folder (`pip install -r requirements.txt` first),\n"
            "write each exercise in its answer cell and run the check cell under it.\n"
            f"`python -m autograder check {notebook.name}` checks a saved notebook from the command line.\n"
        )
        built.append(folder)
    return built
