"""What a student of one lesson may have: the lesson, the public checks, earlier references.

The same subset of this package is what the grader's sandbox imports when it runs a
student's code (docs/architecture.md, "The release rule": the reference of lesson N or later
and the hidden checks are in neither). ``python -m autograder release DEST [LESSON ...]``
(``make release``) writes one folder per lesson: the student notebook, this subset, and the
student's environment files; and before them ``00_start_here/``, the ungraded introduction with
the package as a student of lesson 01 has it (no reference at all), since its notebook
demonstrates the checks on lesson 01's first exercise.

The bundle of lesson N holds the model answers of lessons 1 to N-1, so it may go out only after
the deadline of lesson N-1: ``release_note`` says so for each bundle built.
"""

import re
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
    "checks/public.py", "checks/forbidden.py", "checks/static.py",
    "grading/__init__.py", "grading/child.py", "grading/grade.py", "grading/notebook.py", "grading/progress.py",
    "grading/sandbox/__init__.py", "grading/sandbox/confine.py", "grading/sandbox/jail.py",
    "grading/sandbox/readback.py", "grading/sandbox/warm.py",
)
# What a student's machine needs, by distribution name: the model (torch, numpy), the lessons'
# plots and progress bars, JupyterLab and its Python kernel (which bring nbformat and the rest), and
# the sandbox's seccomp bindings (the package's grader is in every bundle; pure Python, 20 kB).
# jsonschema is pinned for speed: JupyterLab imports it through nbformat, and requirements.txt
# says why its version matters. The versions come from requirements.txt, the one list of pins;
# nbgrader and the project's test tools stay out. tests/test_release.py proves that every import
# in a bundle is satisfied by these.
STUDENT_PACKAGES = ("torch", "numpy", "matplotlib", "tqdm", "jupyterlab", "ipykernel", "jsonschema", "pyseccomp")


def reference_init(lessons):
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
        (root / "reference" / "__init__.py").write_text(reference_init(earlier))
    return root


def pinned_lines(packages):
    """The lines of requirements.txt that pin ``packages``, in the order given."""
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==\S+$", line.strip())
        if match:
            pins[match.group(1).lower()] = line.strip()
    missing = [name for name in packages if name.lower() not in pins]
    if missing:
        raise ValueError(f"requirements.txt pins no {', '.join(missing)}")
    return [pins[name.lower()] for name in packages]


def write_environment(folder, packages, purpose):
    """``folder/requirements.txt`` and ``folder/environment.yml``: ``packages`` at the course's pins."""
    lines = pinned_lines(packages)
    (folder / "requirements.txt").write_text(
        f"# {purpose}, pinned as in the course's requirements.txt.\n" + "\n".join(lines) + "\n")
    (folder / "environment.yml").write_text(
        "# conda env create -f environment.yml && conda activate transformers-from-scratch\n"
        "name: transformers-from-scratch\nchannels:\n  - conda-forge\ndependencies:\n  - python=3.11\n  - pip\n"
        "  - pip:\n" + "".join(f"      - {line}\n" for line in lines))


def _write_bundle(folder, notebook, lesson, readme):
    """``folder``, afresh: the notebook, the package as a student of ``lesson`` has it, the
    student's environment files and a README."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shutil.copyfile(notebook, folder / notebook.name)
    write_student_package(lesson, folder)
    write_environment(folder, STUDENT_PACKAGES, "What a student's machine needs for this lesson")
    for relative in lesson.data_files:  # the text lesson 07 trains on, where the package looks for it
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / relative, folder / relative)
    (folder / "README.md").write_text(readme)
    return folder


def select_lessons(names):
    """The Lessons ``names`` stand for, in course order; each name is a lesson's full name
    (``02_multi_head_attention``) or its number (``02``). No names: every lesson."""
    if not names:
        return list(LESSONS.values())
    chosen = set()
    for name in names:
        matches = [lesson for lesson in LESSONS.values() if name in (lesson.name, lesson.name[:2])]
        if not matches:
            raise ValueError(f"unknown lesson {name!r}; the lessons are {', '.join(LESSONS)} (or their numbers)")
        chosen.update(lesson.name for lesson in matches)
    return [lesson for lesson in LESSONS.values() if lesson.name in chosen]


def release_note(lesson):
    """When the bundle of ``lesson`` may go out, from the model answers it holds; None: the introduction."""
    earlier = [other.name for other in lessons_before(lesson)] if lesson else []
    if not earlier:
        return "holds no model answer; may go out at any time"
    return (f"holds the model answers of {', '.join(earlier)}; hand it out only after the deadline of "
            f"{earlier[-1]}")


def build_release(dest, lessons_dir=REPO / "lessons", names=()):
    """One folder per lesson under ``dest`` (only the lessons ``names``, when given): what a class
    receives for that lesson. Returns [(folder, lesson or None for the introduction)].

    First comes ``00_start_here/``, the ungraded introduction, when lessons_dir has it and the
    first lesson is built (or it is named, as ``00``): the folder a student opens before any
    lesson, so it sorts first and stands on its own.
    """
    dest = Path(dest)
    built = []
    first = next(iter(LESSONS.values()))
    lesson_names = [name for name in names if name not in (INTRODUCTION, INTRODUCTION[:2])]
    introduction_named = len(lesson_names) < len(names)
    chosen = select_lessons(lesson_names) if lesson_names or not names else []  # `release DEST 00`: the introduction only
    introduction = Path(lessons_dir) / INTRODUCTION / f"{INTRODUCTION}.ipynb"
    if introduction.exists() and (introduction_named or first in chosen):
        built.append((_write_bundle(dest / INTRODUCTION, introduction, first, (
            "# Start here\n\n"
            f"Open `{introduction.name}` in JupyterLab from this folder (`pip install -r requirements.txt` first).\n"
            "It shows how the lessons work, how your answers are checked and graded, and the conventions\n"
            f"they use; it is not graded. Then open the first lesson, in the folder `{first.name}`.\n"
        )), None))
    for lesson in chosen:
        notebook = Path(lessons_dir) / lesson.name / f"{lesson.name}.ipynb"
        if not notebook.exists():
            continue
        built.append((_write_bundle(dest / lesson.name, notebook, lesson, (
            f"# {lesson.title}\n\n"
            f"Open `{notebook.name}` in JupyterLab from this folder (`pip install -r requirements.txt` first),\n"
            "write each exercise in its answer cell and run the check cell under it.\n"
            f"`python -m autograder check {notebook.name}` checks a saved notebook from the command line.\n"
        )), lesson))
    return built
