"""Grade a whole class with the trusted grader and record the scores in nbgrader's gradebook.

``python -m autograder autograde [LESSON ...]`` (``make autograde``) grades every
``submitted/<student>/<lesson>/`` notebook in parallel and then, for each submission, does
what ``nbgrader autograde`` would, without running anything of the notebook outside the
sandbox: it records the submission (its ``timestamp.txt``, so nbgrader's late penalty applies)
with each exercise's score as the auto score of its test cell ``test_<exercise>`` and the
check messages as the automatic comment of its answer cell, and writes
``autograded/<student>/<lesson>/<lesson>.ipynb``: the submitted notebook with every output
cleared, its locked cells put back as nbgrader would, and in each test cell the trusted score
and messages as its only output. ``nbgrader generate_feedback`` and ``nbgrader export`` read
those, so a page and ``grades.csv`` carry the trusted score only.

The grader owns the scores of the test cells: a ``manual_score`` or ``extra_credit`` found on
one (from an earlier ``nbgrader autograde``'s kernel, a formgrader edit, or anything else that
wrote the gradebook) is reset, and named in the integrity table. Each submission is written in
one transaction and every one is checked again once every job has ended, so an interrupted
run leaves the gradebook consistent and nothing a job did during the run survives; submitted
files are only read; and a second run while one is in progress is refused. Where the sandbox
has no isolation at all (``sandbox.isolation().level == "none"``) no gradebook is written
unless the instructor says so (``--allow-no-isolation``).
"""

import fcntl
import functools
import multiprocessing
import os
import shutil
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..curriculum import LESSONS
from ..lessons import scripts_on_path
from . import sandbox
from .grade import SubmissionError, grade
from .integrity import tampering
from .notebook import answer_cells, read_notebook
from .sandbox.warm import follow_parent

LOCK_NAME = ".autograder.lock"
# What nbgrader submit writes beside the notebook: the submission's time, and the secret that
# release_feedback files its page under.
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")
NO_ISOLATION_FLAG = "--allow-no-isolation"


class GradingBusy(Exception):
    """Another grading run holds the course's lock."""


class NoIsolation(Exception):
    """The sandbox has no isolation here and the instructor did not allow grading without it."""


@dataclass
class SubmissionResult:
    student: str
    lesson: str
    path: str
    scores: dict  # exercise -> (score, max, messages); empty when the notebook couldn't be graded
    error: str = ""
    tampering: dict = field(default_factory=dict)  # exercise -> [(line, what it does)] in its answer cell
    isolation: str = ""  # the sandbox's isolation its jobs ran in (NotebookGrade.isolation)
    overridden: dict = field(default_factory=dict)  # exercise -> {"manual_score": x, ...} found and reset
    autograded: str = ""  # the notebook written into autograded/, or why none was

    @property
    def score(self):
        return sum(score for score, _, _ in self.scores.values())


@contextmanager
def course_lock(root):
    """Hold the course's grading lock, or raise GradingBusy at once."""
    path = Path(root) / LOCK_NAME
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise GradingBusy(f"another grading run ({holder}) is in progress in {root}; wait for it to finish") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)


def find_submissions(root, lessons, students=None):
    """(student, lesson, notebook path) for every submission; a renamed notebook is found too."""
    found = []
    submitted = Path(root) / "submitted"
    if not submitted.is_dir():
        return found
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        if students and student_dir.name not in students:
            continue
        for lesson in lessons:
            folder = student_dir / lesson
            if not folder.is_dir():
                continue
            expected = folder / f"{lesson}.ipynb"
            notebooks = [expected] if expected.exists() else sorted(folder.glob("*.ipynb"))
            found.append((student_dir.name, lesson, notebooks[0] if notebooks else expected))
    return found


def _tampering(path, lesson):
    try:
        cells = answer_cells(read_notebook(path), LESSONS[lesson])
    except SubmissionError:
        return {}
    return {name: found for name, source in cells.items() if (found := tampering(source))}


def _grade_one(student, lesson, path, step_timeout):
    try:
        result = grade(path, hidden=True, lesson_name=lesson, step_timeout=step_timeout)
    except SubmissionError as exc:
        return SubmissionResult(student, lesson, str(path), {}, str(exc), isolation=sandbox.isolation().description)
    except Exception as exc:  # never lose the run over one notebook
        return SubmissionResult(student, lesson, str(path), {}, f"grading failed: {exc.__class__.__name__}: {exc}",
                                isolation=sandbox.isolation().description)
    scores = {name: (g.score, g.max, g.messages) for name, g in result.exercises.items()}
    return SubmissionResult(student, lesson, str(path), scores, tampering=_tampering(path, lesson),
                            isolation=result.isolation)


def _test_owner(grade_id, lesson):
    """The exercise a test cell belongs to (grade_id test_<name> or test_<name>_<more>), or None."""
    for exercise in LESSONS[lesson].exercises:
        if grade_id == f"test_{exercise.name}" or (grade_id or "").startswith(f"test_{exercise.name}_"):
            return exercise.name
    return None


def _trusted(result, name):
    """(score, messages) of exercise ``name``: 0 and the reason when the notebook couldn't be graded."""
    score, _, messages = result.scores.get(name, (0, LESSONS[result.lesson].exercise(name).points, [result.error]))
    return score, messages


# --- The course's nbgrader settings ---


def course_config(root):
    """The course's nbgrader configuration (its nbgrader_config.py; nothing from ~/.jupyter)."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    if (Path(root) / "nbgrader_config.py").exists():
        return PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    return Config()


def course_settings(root, config=None):
    """(gradebook url, course id) as the course's nbgrader_config.py sets them."""
    directory = (config if config is not None else course_config(root)).get("CourseDirectory", {})
    db_url = directory.get("db_url") or f"sqlite:///{Path(root) / 'gradebook.db'}"
    return db_url, directory.get("course_id") or "default_course"


# --- The gradebook ---


def _submission_time(folder):
    """The time in ``folder/timestamp.txt`` (written by nbgrader collect), or None."""
    from nbgrader.utils import parse_utc

    try:
        text = (Path(folder) / "timestamp.txt").read_text().strip()
        return parse_utc(text) if text else None
    except (OSError, ValueError):
        return None


def _late_penalty(config, student, score, seconds_late):
    """nbgrader's late penalty (AssignLatePenalties' plugin, as the course configures it), within [0, score]."""
    from nbgrader.preprocessors import AssignLatePenalties

    if seconds_late <= 0:
        return None
    assigner = AssignLatePenalties(config=config)
    assigner.init_plugin()
    penalty = assigner.plugin_inst.late_submission_penalty(student, score, seconds_late)
    return None if penalty is None else min(max(penalty, 0.0), score)


def record(gradebook, result, config):
    """Write one submission's trusted scores into the gradebook, in one transaction; return what was
    there that the trusted grader does not own: {exercise: {"manual_score": ..., "extra_credit": ...}}."""
    from nbgrader.api import MissingEntry
    from sqlalchemy.exc import SAWarning

    lesson = LESSONS[result.lesson]
    overridden = {}
    try:
        gradebook.update_or_create_student(result.student)
        stamp = _submission_time(Path(result.path).parent)
        with warnings.catch_warnings():  # nbgrader's add_submission autoflushes the row it is building
            warnings.simplefilter("ignore", SAWarning)
            submission = gradebook.update_or_create_submission(result.lesson, result.student,
                                                               **({"timestamp": stamp} if stamp else {}))
        notebook = gradebook.find_submission_notebook(result.lesson, result.lesson, result.student)
        grades = {grade.name: grade for grade in notebook.grades}
        comments = {comment.name: comment for comment in notebook.comments}
        for exercise in lesson.exercises:
            score, messages = _trusted(result, exercise.name)
            grade = grades.get(f"test_{exercise.name}")
            if grade is None:  # as find_grade would say
                raise MissingEntry(f"No such grade: {result.lesson}/{result.lesson}/test_{exercise.name} "
                                   f"for {result.student}")
            foreign = {key: value for key in ("manual_score", "extra_credit")
                       if (value := getattr(grade, key)) is not None}
            if foreign:
                overridden[exercise.name] = foreign
            grade.auto_score, grade.manual_score, grade.extra_credit = float(score), None, None
            grade.needs_manual_grade = False
            if exercise.name in comments:  # an assignment without this answer cell registered has none
                comments[exercise.name].auto_comment = "\n".join(messages)
        notebook.late_submission_penalty = _late_penalty(config, result.student, result.score,
                                                         submission.total_seconds_late)
        gradebook.db.commit()
    except BaseException:
        gradebook.db.rollback()
        raise
    return overridden


# --- autograded/: what nbgrader generate_feedback reads ---


def _trusted_output(result, name):
    import nbformat

    score, messages = _trusted(result, name)
    text = f"Trusted grade: {score:g} / {LESSONS[result.lesson].exercise(name).points:g}\n"
    return nbformat.v4.new_output("stream", name="stdout", text=text + "".join(f"{m}\n" for m in messages))


@functools.lru_cache(maxsize=None)
def course_cells(db_url, lesson):
    """{grade_id: (cell type, source, nbgrader metadata)} of the cells that nbgrader generate_assignment
    registered for the lesson, in the notebook's order (test cells with their hidden tests); read
    once per process."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gradebook:
        notebook = gradebook.find_notebook(lesson, lesson)
        points = {cell.name: cell.max_score for cell in notebook.grade_cells}
        solutions = {cell.name for cell in notebook.solution_cells}
        tasks = {cell.name for cell in notebook.task_cells}
        return {cell.name: (cell.cell_type, cell.source, {
            "grade": cell.name in points, "grade_id": cell.name, "locked": cell.locked,
            "solution": cell.name in solutions, "task": cell.name in tasks, "schema_version": 3,
            **({"points": points[cell.name]} if cell.name in points else {})}) for cell in notebook.source_cells}


def _new_cell(cell_type, source, metadata):
    import nbformat

    make = nbformat.v4.new_code_cell if cell_type == "code" else nbformat.v4.new_markdown_cell
    return make(source, metadata=metadata)


def course_version(notebook, cells):
    """The submitted notebook as nbgrader's autograde would hand it on, without running it: outputs
    cleared; each cell registered in ``cells`` (the first with its grade_id) with the course's
    nbgrader metadata and, where locked, the course's cell; every other cell's nbgrader metadata
    dropped; a registered grade cell the student deleted put back after the registered cell
    before it."""
    kept, seen = [], set()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        nbgrader = cell.metadata.pop("nbgrader", None)
        grade_id = nbgrader.get("grade_id") if isinstance(nbgrader, dict) else None
        if grade_id in cells and grade_id not in seen:
            seen.add(grade_id)
            cell_type, source, nbgrader = cells[grade_id]
            cell.metadata["nbgrader"] = dict(nbgrader)
            if nbgrader["locked"] and (cell.cell_type, cell.source) != (cell_type, source):
                cell = _new_cell(cell_type, source, cell.metadata)
        kept.append((grade_id if grade_id in seen else None, cell))
    order = list(cells)
    for grade_id, (cell_type, source, nbgrader) in cells.items():
        if nbgrader["grade"] and grade_id not in seen:
            before = {order[i] for i in range(order.index(grade_id))}
            at = max((i + 1 for i, (name, _) in enumerate(kept) if name in before), default=0)
            kept.insert(at, (grade_id, _new_cell(cell_type, source, {"nbgrader": dict(nbgrader)})))
            seen.add(grade_id)
    notebook.cells = [cell for _, cell in kept]
    return notebook


def write_autograded(root, result, db_url):
    """Write ``autograded/<student>/<lesson>/<lesson>.ipynb``: the submission as ``course_version``
    makes it, with the trusted score and messages as each test cell's output. Nothing of the
    notebook runs. Returns the notebook written, or why there is none."""
    import nbformat

    folder = Path(root) / "autograded" / result.student / result.lesson
    shutil.rmtree(folder, ignore_errors=True)
    try:
        notebook = course_version(nbformat.read(result.path, as_version=4), course_cells(db_url, result.lesson))
    except Exception as exc:
        return f"no autograded notebook: {Path(result.path).name} cannot be read ({exc.__class__.__name__})"
    for cell in notebook.cells:
        name = _test_owner(cell.metadata.get("nbgrader", {}).get("grade_id"), result.lesson)
        if cell.cell_type == "code" and name is not None:
            cell.outputs = [_trusted_output(result, name)]
    folder.mkdir(parents=True)
    for name in EXCHANGE_FILES:  # generate_feedback copies them on, and release_feedback needs them
        if (Path(result.path).parent / name).is_file():
            shutil.copyfile(Path(result.path).parent / name, folder / name)
    path = folder / f"{result.lesson}.ipynb"
    nbformat.write(notebook, path)
    return str(path)


def autograde(root, lessons=None, students=None, jobs=None, step_timeout=60.0, progress=True,
              allow_no_isolation=False):
    """Grade every submission of ``lessons`` under ``root``, record the scores and write autograded/;
    returns the results."""
    from nbgrader.api import Gradebook
    from tqdm.auto import tqdm

    lessons = list(lessons or LESSONS)
    for name in lessons:
        if name not in LESSONS:
            raise SubmissionError(f"unknown lesson {name!r}; the lessons are {', '.join(LESSONS)}")
    isolation = sandbox.isolation()
    if isolation.level == "none" and not allow_no_isolation:
        raise NoIsolation(f"the sandbox has no isolation on this machine ({isolation.description}): a student's "
                          "code could read the course and write the gradebook. Grade on a Linux machine with "
                          f"bubblewrap or user namespaces (docs/instructors.md), or pass {NO_ISOLATION_FLAG} "
                          "to grade anyway")
    root = Path(root).resolve()
    config = course_config(root)
    db_url, course_id = course_settings(root, config)
    results = []
    # nbgrader creates a new gradebook by running `alembic`, found on PATH: this Python's, even
    # when its environment is not activated.
    with course_lock(root), scripts_on_path():
        # Lesson by lesson: each worker keeps the lesson's warm server busy (grading/warm.py).
        submissions = sorted(find_submissions(root, lessons, students), key=lambda found: (found[1], found[0]))
        with Gradebook(db_url, course_id) as gradebook:
            for name in {lesson for _, lesson, _ in submissions}:
                gradebook.find_assignment(name)  # MissingEntry: run nbgrader generate_assignment first
            jobs = jobs or os.cpu_count() or 1
            # Spawned, not forked: a forked worker would inherit the lock and hold it after a kill.
            # Each worker ends with this process, and its warm servers with it (follow_parent).
            with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                     initializer=follow_parent, initargs=(os.getpid(),)) as pool:
                futures = [pool.submit(_grade_one, s, l, p, step_timeout) for s, l, p in submissions]
                for future in tqdm(as_completed(futures), total=len(futures), desc="grading", unit="notebook",
                                   disable=not progress):
                    result = future.result()
                    result.overridden = record(gradebook, result, config)
                    result.autograded = write_autograded(root, result, db_url)
                    results.append(result)
            # Every job has ended: whatever one of them wrote into the gradebook meanwhile goes now.
            for result in results:
                for name, found in record(gradebook, result, config).items():
                    result.overridden.setdefault(name, found)
    return sorted(results, key=lambda r: (r.lesson, r.student))


def integrity_rows(results):
    """[(student, lesson, exercise, why to look)] for the integrity table."""
    rows = []
    for r in results:
        for name, found in r.overridden.items():
            values = " and ".join(f"{key} {value:g}" for key, value in found.items())
            rows.append((r.student, r.lesson, name, f"the gradebook held {values} on test_{name}, which the trusted "
                                                    "grader does not give: reset to its score"))
        for name, found in r.tampering.items():
            for line, what in found:
                rows.append((r.student, r.lesson, name, f"its answer cell {what} (line {line})"))
    return rows


def summary_table(results):
    """The run's results as text: the isolation used, one line per submission, the class's count,
    then the integrity table."""
    isolations = sorted({r.isolation for r in results if r.isolation}) or [sandbox.isolation().description]
    lines = [f"Isolation of the students' code: {'; '.join(isolations)}", ""]
    lines.append(f"{'lesson':<26} {'student':<16} {'score':>9}  notes")
    for r in results:
        maximum = LESSONS[r.lesson].max_score
        failed = [name for name, (score, top, _) in r.scores.items() if score < top]
        notes = r.error or (("lost: " + ", ".join(failed)) if failed else "")
        lines.append(f"{r.lesson:<26} {r.student:<16} {r.score:>4g} / {maximum:<3g}  {notes}")
    lines.append(f"{len(results)} submission(s) graded")
    rows = integrity_rows(results)
    lines.append("")
    if not rows:
        lines.append("Integrity: nothing to look at (no score in the gradebook but the trusted grader's; "
                     "no answer patches the tools).")
        return "\n".join(lines)
    lines.append(f"Integrity: {len(rows)} thing(s) to look at (the trusted scores above already ignore them)")
    lines.append(f"{'student':<16} {'lesson':<26} {'exercise':<30} why")
    lines += [f"{student:<16} {lesson:<26} {name:<30} {why}" for student, lesson, name, why in rows]
    return "\n".join(lines)
