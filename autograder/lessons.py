"""Generate lessons/ (what students open) from solutions/ (what authors edit).

    python -m autograder.lessons                 # rewrite lessons/ (what `make lessons` runs)
    python -m autograder.lessons --output DIR    # write the lessons into DIR instead

Every lesson of autograder/curriculum.py that has a source notebook
(solutions/NN_topic/NN_topic.ipynb), and before them the ungraded introduction
(solutions/00_start_here/, curriculum.INTRODUCTION), goes through `nbgrader generate_assignment` with
the course's nbgrader_config.py (and no other configuration, so that a personal
~/.jupyter cannot change the result): solutions become stubs, hidden tests disappear,
outputs and the solution run's widget state are cleared (ClearWidgetState in nbgrader_config.py,
so that `nbgrader generate_assignment` writes the same bytes). nbgrader works in a throw-away copy of the course, so no gradebook
is left behind. The same solutions always give the same bytes.
"""

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from autograder.curriculum import INTRODUCTION, LESSONS

REPO = Path(__file__).resolve().parent.parent
IGNORED = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc")


def source_notebook(lesson_name, root=REPO):
    return root / "solutions" / lesson_name / f"{lesson_name}.ipynb"


def lesson_notebook(lesson_name, root=REPO):
    return root / "lessons" / lesson_name / f"{lesson_name}.ipynb"


def lessons_with_sources(root=REPO):
    """The names of the curriculum's (graded) lessons that have a source notebook, in order."""
    return [name for name in LESSONS if source_notebook(name, root).is_file()]


def notebooks_with_sources(root=REPO):
    """Every notebook `make lessons` generates, in order: the ungraded introduction, then the lessons."""
    introduction = [INTRODUCTION] if source_notebook(INTRODUCTION, root).is_file() else []
    return introduction + lessons_with_sources(root)


@contextlib.contextmanager
def scripts_on_path():
    """Put this Python's scripts first on PATH for a while: nbgrader runs `alembic` by name."""
    old = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), old])
    try:
        yield
    finally:
        os.environ["PATH"] = old


def generate(output, root=REPO):
    """Write the student version of every notebook with a source (introduction and lessons) into `output`.

    `output` gets one folder per notebook; existing folders of those notebooks are replaced.
    Returns their names.
    """
    from nbgrader.apps import NbGraderAPI  # slow to import: only when generating
    from traitlets.config.loader import PyFileConfigLoader

    names = notebooks_with_sources(root)
    output = Path(output)
    with tempfile.TemporaryDirectory(prefix="lessons-") as tmp, scripts_on_path():
        course = Path(tmp)
        shutil.copy(root / "nbgrader_config.py", course)
        for name in names:
            shutil.copytree(root / "solutions" / name, course / "solutions" / name, ignore=IGNORED)
        # Only the course's own configuration: nothing from ~/.jupyter.
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
        api = NbGraderAPI(config=config)
        for name in names:
            result = api.generate_assignment(name, force=True, create=True)
            if not result["success"]:
                raise RuntimeError(f"nbgrader generate_assignment {name} failed:\n"
                                   f"{result.get('error') or result.get('log')}")
        output.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.rmtree(output / name, ignore_errors=True)
            shutil.copytree(course / "lessons" / name, output / name)
    return names


def has_been_run(notebook_path):
    """True if the notebook holds outputs, i.e. someone ran it: generated notebooks have none."""
    cells = json.loads(Path(notebook_path).read_text(encoding="utf-8"))["cells"]
    return any(cell.get("outputs") or cell.get("execution_count") for cell in cells)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder.lessons", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=REPO / "lessons",
                        help="where to write the lessons (default: lessons/ of the repository)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite lesson notebooks that hold outputs (someone's work)")
    args = parser.parse_args(argv)

    names = notebooks_with_sources()
    targets = [args.output / name / f"{name}.ipynb" for name in names]
    worked_on = [path for path in targets if path.is_file() and has_been_run(path)]
    if worked_on and not args.force:
        parser.exit(1, "These notebooks have been run, so they may hold someone's work; move them away "
                       "or pass --force to overwrite them:\n" + "\n".join(f"  {path}" for path in worked_on) + "\n")

    generate(args.output)
    for path in targets:
        print(f"generated {path}")
    if not names:
        print("no lesson has a source notebook in solutions/ yet")


if __name__ == "__main__":
    main()
