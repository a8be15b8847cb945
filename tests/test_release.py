"""What students receive gives nothing away: no solution, no hidden check, no later reference.

For each lesson N, `make release` writes the student notebook, the public checks and the
reference of lessons before N only (docs/architecture.md, the release rule), and says which
model answers each bundle holds. The grader's sandbox imports the same subset, so these tests
also bound what a student's code can import while it is graded. A bundle's requirements.txt
lists what a student's machine needs, and nothing the bundle imports is missing from it.
Before the lessons comes 00_start_here/, the ungraded introduction: no reference at all, and
the public checks of lesson 01 only, which its notebook demonstrates.
"""

import ast
import contextlib
import io
import shutil
import subprocess
import sys
from importlib import metadata

import nbformat
import pytest
from nbclient import NotebookClient

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from autograder.__main__ import main as autograder_main
from autograder.curriculum import EXERCISES, INTRODUCTION, LESSONS
from autograder.lessons import REPO, lessons_with_sources, notebooks_with_sources, source_notebook
from autograder.release import STUDENT_FILES, build_release

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def solution_lines(lesson_name):
    """The substantial lines written between the solution markers of a lesson's source notebook."""
    lines = set()
    for cell in nbformat.read(source_notebook(lesson_name), as_version=4).cells:
        inside = False
        for line in cell.source.splitlines():
            stripped = line.strip()
            if stripped.startswith(BEGIN):
                inside = True
            elif stripped.startswith(END):
                inside = False
            elif inside and len(stripped) >= 30 and not stripped.startswith("#"):
                lines.add(stripped)
    return lines


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    dest = tmp_path_factory.mktemp("release")
    return dest, [folder for folder, _ in build_release(dest)]


def files_of(folder):
    return {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file()}


def test_every_generated_lesson_is_released(release):
    dest, built = release
    assert [folder.name for folder in built] == notebooks_with_sources(), "the introduction first, then the lessons in order"
    assert INTRODUCTION in notebooks_with_sources()


def assert_no_solution_lines(texts, number, allowed=()):
    """No text holds a solution line of lesson ``number`` or later, except lines the files ``allowed`` have too.

    A line an earlier lesson's answer also has (an Encoder and a Decoder end alike) gives nothing away.
    """
    # The given code every bundle ships (lesson 06's and 07's training helpers) gives nothing away either.
    given = [f"autograder/{name}" for name in STUDENT_FILES if not name.startswith(("checks/", "grading/"))]
    given += [f"lesson_tools/{path.name}" for path in sorted((REPO / "lesson_tools").glob("*.py"))]
    earlier = "\n".join((REPO / name).read_text() for name in [*allowed, *given])
    for later in LESSONS:
        if LESSONS[later].number >= number and later in lessons_with_sources():
            # Compared without trailing comments: an earlier answer may say the same line with a shape comment.
            seen = {part for l in earlier.splitlines() for part in (l.strip(), l.split("#")[0].strip())}
            for line in solution_lines(later) - seen:
                leaks = [name for name, text in texts.items() if line in text]
                assert not leaks, f"a solution line of {later} is in {leaks}: {line!r}"


def texts_of(files):
    """The bundle's text files, each checked for what must never be handed out."""
    texts = {name: p.read_text(errors="replace") for name, p in files.items() if not name.endswith(".pt")}
    for name, text in texts.items():
        assert BEGIN not in text and "BEGIN HIDDEN TESTS" not in text and "check_hidden" not in text, name
    return texts


@pytest.mark.parametrize("lesson", lessons_with_sources())
def test_a_lesson_bundle_holds_only_what_its_students_may_see(release, lesson):
    dest, _ = release
    folder = dest / lesson
    files = files_of(folder)
    number = LESSONS[lesson].number
    assert f"{lesson}.ipynb" in files and "requirements.txt" in files
    assert not any(name.startswith(("solutions/", "tests/")) or "/hidden/" in name for name in files), sorted(files)
    allowed = {f"autograder/reference/{LESSONS[other].reference_module}.py" for other in LESSONS if LESSONS[other].number < number}
    references = {name for name in files if name.startswith("autograder/reference/") and name.endswith(".py")}
    assert references - {"autograder/reference/__init__.py"} == allowed
    data = {name for name in files if name.startswith("autograder/checks/data/")}
    assert data <= {f"autograder/checks/data/{other}.pt" for other in LESSONS if LESSONS[other].number <= number}
    assert_no_solution_lines(texts_of(files), number, allowed)


def test_the_introduction_bundle_holds_no_reference(release):
    dest, _ = release
    files = files_of(dest / INTRODUCTION)
    assert {f"{INTRODUCTION}.ipynb", "README.md", "requirements.txt", "environment.yml", "autograder/curriculum.py",
            "autograder/checks/public.py"} <= set(files), sorted(files)
    assert not any(name.startswith(("solutions/", "tests/", "autograder/reference/")) or "/hidden/" in name
                   for name in files), sorted(files)
    first = next(iter(LESSONS))  # its notebook shows what lesson 01's checks say, so it needs their data
    assert {name for name in files if name.startswith("autograder/checks/data/")} == {f"autograder/checks/data/{first}.pt"}
    assert not any(name.endswith(".ipynb") for name in files if name != f"{INTRODUCTION}.ipynb")
    assert_no_solution_lines(texts_of(files), number=0)


def test_the_introduction_runs_in_its_bundle(release, jupyter_env):
    """Top to bottom without an error, importing the bundle's autograder, not this checkout's."""
    dest, _ = release
    folder = dest / INTRODUCTION
    nb = nbformat.read(folder / f"{INTRODUCTION}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import autograder\nprint(autograder.__file__)"))
    NotebookClient(nb, timeout=120, allow_errors=True, resources={"metadata": {"path": str(folder)}}).execute()
    errors = [(i, output.ename, output.evalue) for i, cell in enumerate(nb.cells)
              for output in cell.get("outputs", []) if output.output_type == "error"]
    assert not errors, errors
    assert nb.cells[-1].outputs[0].text.strip() == str(folder / "autograder" / "__init__.py")
    printed = "".join(output.get("text", "") for cell in nb.cells for output in cell.get("outputs", []))
    assert "meets 0 of 5 requirements" in printed and "is not implemented yet" in printed


@pytest.mark.parametrize("lesson", lessons_with_sources())
def test_a_bundle_runs_its_public_checks_on_its_own(release, lesson):
    """With nothing but the bundle on the path: the lesson's imports work and the stubs say so."""
    dest, _ = release
    folder = dest / lesson
    code = ("import autograder.checks as c, autograder.reference as r; "
            f"exec(compile(open({str(folder / (lesson + '.ipynb'))!r}).read(), 'x', 'exec')) if False else None; "
            "import importlib.util as u; print(u.find_spec('autograder.checks.hidden'))")
    run = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "None"
    check = subprocess.run([sys.executable, "-m", "autograder", "check", f"{lesson}.ipynb", "--json"], cwd=folder,
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr
    assert '"score": 0' in check.stdout and "not implemented yet" in check.stdout


def test_the_course_progress_table_works_from_a_bundle(release, tmp_path):
    """A class's folders side by side: `python -m autograder check ..` from one bundle covers them all,
    each lesson checked with its own bundle's data (a bundle holds no later lesson's)."""
    dest, _ = release
    first, second = list(LESSONS)[:2]  # two bundles are enough, and keep this test short
    for name in (first, second):
        shutil.copytree(dest / name, tmp_path / name)
    run = subprocess.run([sys.executable, "-m", "autograder", "check", ".."], cwd=tmp_path / first,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    for name in (first, second):
        assert any(line.startswith(name) and "✗" in line and "not implemented" in line for line in lines), run.stdout
    assert all(any(line.startswith(name) and "no notebook found" in line for line in lines)
               for name in list(LESSONS)[2:]), run.stdout
    assert f"0 of {len(EXERCISES)} exercises pass" in run.stdout, run.stdout


def test_only_the_lessons_named_are_built_and_each_says_what_it_gives_away(tmp_path):
    first, second, third = list(LESSONS)[:3]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert autograder_main(["release", str(tmp_path), "01", second]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [INTRODUCTION, first, second], "the introduction goes with 01"
    notes = {line.split(":")[0].rsplit("/", 1)[-1]: line for line in out.getvalue().splitlines()}
    assert "holds no model answer" in notes[first] and "holds no model answer" in notes[INTRODUCTION]
    assert f"holds the model answers of {first}; hand it out only after the deadline of {first}" in notes[second]
    assert [folder.name for folder, _ in build_release(tmp_path / "later", names=["03"])] == [third]
    with contextlib.redirect_stderr(io.StringIO()) as err:
        assert autograder_main(["release", str(tmp_path), "99"]) == 2
    assert "unknown lesson '99'" in err.getvalue()


def imported_modules(folder):
    """{top-level module: a file importing it} for every absolute import in the bundle's Python
    files and notebook code cells (IPython's %magic and !shell lines left out)."""
    sources = {p: p.read_text() for p in folder.rglob("*.py")}
    for notebook in folder.rglob("*.ipynb"):
        for i, cell in enumerate(nbformat.read(notebook, as_version=4).cells):
            if cell.cell_type == "code":
                code = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
                sources[f"{notebook.name} cell {i}"] = code
    found = {}
    for where, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found.update({alias.name.split(".")[0]: where for alias in node.names})
            elif isinstance(node, ast.ImportFrom) and not node.level:
                found[node.module.split(".")[0]] = where
    return found


def installed_closure(requirements_file):
    """The distributions a `pip install -r requirements_file` brings: those listed and all they require."""
    todo = [Requirement(line).name for line in requirements_file.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    seen = set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for line in metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


@pytest.mark.parametrize("lesson", notebooks_with_sources())
def test_every_import_in_a_bundle_is_satisfied_by_its_requirements(release, lesson):
    dest, _ = release
    folder = dest / lesson
    if not folder.exists():
        pytest.skip(f"lessons/{lesson}/ is not generated yet (make lessons)")
    installed = installed_closure(folder / "requirements.txt")
    assert "nbgrader" not in installed and "pytest" not in installed and "playwright" not in installed
    providers = metadata.packages_distributions()
    missing = {module: where for module, where in imported_modules(folder).items()
               if module not in sys.stdlib_module_names and module not in ("autograder", "lesson_tools")
               and not {canonicalize_name(d) for d in providers.get(module, [])} & installed}
    assert not missing, f"imported by {lesson}'s bundle, installed by none of its requirements: {missing}"


def test_nbgrader_generate_assignment_writes_what_make_lessons_wrote(tmp_path, jupyter_env):
    """The documented registration (`nbgrader generate_assignment --force <lesson>`) leaves lessons/
    as it is: lesson 06's solution run saved tqdm's widget state, which neither may ship."""
    name = "06_full_model"
    assert "widgets" in nbformat.read(source_notebook(name), as_version=4).metadata, \
        "the solution no longer carries widget state: pick a lesson whose solution does"
    shutil.copy(REPO / "nbgrader_config.py", tmp_path)
    shutil.copytree(REPO / "solutions" / name, tmp_path / "solutions" / name)
    shutil.copytree(REPO / "lessons" / name, tmp_path / "lessons" / name)
    done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "--force", name], cwd=tmp_path,
                          env=jupyter_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    generated = (tmp_path / "lessons" / name / f"{name}.ipynb").read_bytes()
    assert generated == (REPO / "lessons" / name / f"{name}.ipynb").read_bytes()
