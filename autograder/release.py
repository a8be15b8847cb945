"""What a student of one lesson may have: the lesson, the public checks, earlier references.

The same subset of this package is what the grader's sandbox imports when it runs a
student's code (ARCHITECTURE.md: the reference of lesson N or later and the hidden checks
are in neither). ``python -m autograder release DEST`` (``make release``) writes one folder
per lesson: the student notebook, this subset, and the environment files; and before them
``00_start_here/``, the ungraded introduction with the package as a student of lesson 01 has it
(no reference at all), since its notebook demonstrates the checks on lesson 01's first exercise.
"""

import shutil
from pathlib import Path

from .curriculum import INTRODUCTION, LESSONS, lessons_before

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parent

# The package's own files a student may have: the public checks, the runner, the CLI's
# `check`, lesson 06's training task and lesson 07's text, tokenizer and training loop (which use
# no reference a student isn't allowed). Everything else (reference/, checks/hidden/, solutions) is added selectively or never.
STUDENT_FILES = (
    "__init__.py", "__main__.py", "curriculum.py", "release.py", "reversal.py", "language_data.py",
    "checks/__init__.py", "checks/runner.py", "checks/compare.py", "checks/properties.py",
    "checks/public.py", "checks/forbidden.py",
    "grading/__init__.py", "grading/child.py", "grading/grade.py", "grading/notebook.py", "grading/progress.py",
    "grading/sandbox.py",
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


def _write_bundle(folder, notebook, lesson, readme):
    """``folder``, afresh: the notebook, the package as a student of ``lesson`` has it, the
    environment files and a README."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shutil.copyfile(notebook, folder / notebook.name)
    write_student_package(lesson, folder)
    for name in ENVIRONMENT_FILES:
        shutil.copyfile(REPO / name, folder / name)
    for relative in lesson.data_files:  # the text lesson 07 trains on, where the package looks for it
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / relative, folder / relative)
    (folder / "README.md").write_text(readme)
    return folder


def build_release(dest, lessons_dir=REPO / "lessons"):
    """One folder per lesson under ``dest``: what a class receives for that lesson.

    First comes ``00_start_here/``, the ungraded introduction, when lessons_dir has it: the
    folder a student opens before any lesson, so it sorts first and stands on its own.
    """
    dest = Path(dest)
    built = []
    introduction = Path(lessons_dir) / INTRODUCTION / f"{INTRODUCTION}.ipynb"
    first = next(iter(LESSONS.values()))
    if introduction.exists():
        built.append(_write_bundle(dest / INTRODUCTION, introduction, first, (
            "# Start here\n\n"
            f"Open `{introduction.name}` in JupyterLab from this folder (`pip install -r requirements.txt` first).\n"
            "It shows how the lessons work, how your answers are checked and graded, and the conventions\n"
            f"they use; it is not graded. Then open the first lesson, in the folder `{first.name}`.\n"
        )))
    for lesson in LESSONS.values():
        notebook = Path(lessons_dir) / lesson.name / f"{lesson.name}.ipynb"
        if not notebook.exists():
            continue
        built.append(_write_bundle(dest / lesson.name, notebook, lesson, (
            f"# {lesson.title}\n\n"
            f"Open `{notebook.name}` in JupyterLab from this folder (`pip install -r requirements.txt` first),\n"
            "write each exercise in its answer cell and run the check cell under it.\n"
            f"`python -m autograder check {notebook.name}` checks a saved notebook from the command line.\n"
        )))
    return built
