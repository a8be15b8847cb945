"""Grade a whole class with the trusted grader and record the scores in nbgrader's gradebook.

``python -m autograder autograde [LESSON ...]`` (``make autograde``) grades every
``submitted/<student>/<lesson>/`` notebook in parallel, writes each exercise's score as the
auto score of its test cell ``test_<exercise>`` (and the check messages as the automatic
comment of its answer cell), and prints a summary. Manual scores are never touched, so
regrading is idempotent and keeps them; each submission is written in one transaction, so an
interrupted run leaves the gradebook consistent; submitted files are only read; and a second
run while one is in progress is refused.

One verdict everywhere: where nbgrader's own ``autograde`` has written ``autograded/`` (whose
notebooks ``generate_feedback`` turns into the students' feedback pages), the outputs of each
test cell are replaced by the trusted grader's score and messages, so that a page never shows
nbgrader's in-kernel verdict beside the trusted score. What nbgrader's run concluded is kept in
the cell's metadata, and the summary ends with an integrity table: exercises where nbgrader's run
scored higher than the trusted grader, and answer cells that patch torch, numpy or the checks.
"""

import fcntl
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..curriculum import LESSONS
from ..lessons import scripts_on_path
from .grade import SubmissionError, grade
from .integrity import tampering
from .sandbox.warm import follow_parent
from .notebook import answer_cells, read_notebook

LOCK_NAME = ".autograder.lock"


class GradingBusy(Exception):
    """Another grading run holds the course's lock."""


@dataclass
class SubmissionResult:
    student: str
    lesson: str
    path: str
    scores: dict  # exercise -> (score, max, messages); empty when the notebook couldn't be graded
    error: str = ""
    tampering: dict = field(default_factory=dict)  # exercise -> [(line, what it does)] in its answer cell
    nbgrader_scores: dict = field(default_factory=dict)  # exercise -> what nbgrader's own run gave it

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
        return SubmissionResult(student, lesson, str(path), {}, str(exc))
    except Exception as exc:  # never lose the run over one notebook
        return SubmissionResult(student, lesson, str(path), {}, f"grading failed: {exc.__class__.__name__}: {exc}")
    scores = {name: (g.score, g.max, g.messages) for name, g in result.exercises.items()}
    return SubmissionResult(student, lesson, str(path), scores, tampering=_tampering(path, lesson))


def _test_owner(grade_id, lesson):
    """The exercise a test cell belongs to (grade_id test_<name> or test_<name>_<more>), or None."""
    for exercise in LESSONS[lesson].exercises:
        if grade_id == f"test_{exercise.name}" or (grade_id or "").startswith(f"test_{exercise.name}_"):
            return exercise.name
    return None


def rewrite_autograded(root, result):
    """Replace the outputs of the test cells of the submission's notebook in ``autograded/`` (if
    nbgrader's autograde wrote one) with the trusted score and messages; return what nbgrader's
    own run scored each exercise ({} without such a notebook)."""
    import nbformat

    path = Path(root) / "autograded" / result.student / result.lesson / Path(result.path).name
    if not path.is_file():
        return {}
    notebook = nbformat.read(path, as_version=4)
    lesson = LESSONS[result.lesson]
    passed = {}
    for cell in notebook.cells:
        name = _test_owner(cell.metadata.get("nbgrader", {}).get("grade_id"), result.lesson)
        if cell.cell_type != "code" or name is None:
            continue
        kept = cell.metadata.setdefault("autograder", {})
        if "nbgrader_passed" not in kept:  # nbgrader's own verdict, before the first rewrite
            kept["nbgrader_passed"] = not any(o.get("output_type") == "error" for o in cell.get("outputs", []))
        passed[name] = passed.get(name, True) and kept["nbgrader_passed"]
        score, top, messages = result.scores.get(name, (0, lesson.exercise(name).points, [result.error]))
        text = f"Trusted grade: {score:g} / {top:g}\n" + "".join(f"{line}\n" for line in messages)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    tmp = path.with_suffix(".ipynb.tmp")
    nbformat.write(notebook, tmp)
    tmp.replace(path)
    return {name: lesson.exercise(name).points if ok else 0 for name, ok in passed.items()}


def record(gradebook, result):
    """Write one submission's trusted scores into the gradebook, in one transaction."""
    lesson = LESSONS[result.lesson]
    try:
        gradebook.update_or_create_student(result.student)
        try:
            gradebook.find_submission(result.lesson, result.student)
        except Exception:
            gradebook.add_submission(result.lesson, result.student)
        for exercise in lesson.exercises:
            score, _, messages = result.scores.get(exercise.name, (0, exercise.points, [result.error]))
            grade = gradebook.find_grade(f"test_{exercise.name}", result.lesson, result.lesson, result.student)
            grade.auto_score = float(score)
            grade.needs_manual_grade = False
            try:
                comment = gradebook.find_comment(exercise.name, result.lesson, result.lesson, result.student)
                comment.auto_comment = "\n".join(messages)
            except Exception:
                pass  # an assignment without this answer cell registered has no comment to fill
        gradebook.db.commit()
    except BaseException:
        gradebook.db.rollback()
        raise


def course_settings(root):
    """(gradebook url, course id) as the course's nbgrader_config.py sets them."""
    from traitlets.config.loader import PyFileConfigLoader

    directory = {}
    if (Path(root) / "nbgrader_config.py").exists():
        directory = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config().get("CourseDirectory", {})
    db_url = directory.get("db_url") or f"sqlite:///{Path(root) / 'gradebook.db'}"
    return db_url, directory.get("course_id") or "default_course"


def autograde(root, lessons=None, students=None, jobs=None, step_timeout=60.0, progress=True):
    """Grade every submission of ``lessons`` under ``root`` and record the scores; returns the results."""
    from nbgrader.api import Gradebook
    from tqdm.auto import tqdm

    lessons = list(lessons or LESSONS)
    for name in lessons:
        if name not in LESSONS:
            raise SubmissionError(f"unknown lesson {name!r}; the lessons are {', '.join(LESSONS)}")
    root = Path(root).resolve()
    db_url, course_id = course_settings(root)
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
                    record(gradebook, result)
                    result.nbgrader_scores = rewrite_autograded(root, result)
                    results.append(result)
    return sorted(results, key=lambda r: (r.lesson, r.student))


def integrity_rows(results):
    """[(student, lesson, exercise, why to look)] for the integrity table."""
    rows = []
    for r in results:
        for name, nbgrader_score in r.nbgrader_scores.items():
            trusted = r.scores.get(name, (0,))[0]
            if nbgrader_score > trusted:
                rows.append((r.student, r.lesson, name, f"nbgrader's own run gave {nbgrader_score:g}, "
                                                        f"the trusted grader {trusted:g}"))
        for name, found in r.tampering.items():
            for line, what in found:
                rows.append((r.student, r.lesson, name, f"its answer cell {what} (line {line})"))
    return rows


def summary_table(results):
    """The run's results as text: one line per submission, the class's count, then the integrity table."""
    lines = [f"{'lesson':<26} {'student':<16} {'score':>9}  notes"]
    for r in results:
        maximum = LESSONS[r.lesson].max_score
        failed = [name for name, (score, top, _) in r.scores.items() if score < top]
        notes = r.error or (("lost: " + ", ".join(failed)) if failed else "")
        lines.append(f"{r.lesson:<26} {r.student:<16} {r.score:>4g} / {maximum:<3g}  {notes}")
    lines.append(f"{len(results)} submission(s) graded")
    rows = integrity_rows(results)
    lines.append("")
    if not rows:
        lines.append("Integrity: nothing to look at (nbgrader's run never scored higher; no answer patches the tools).")
        return "\n".join(lines)
    lines.append(f"Integrity: {len(rows)} thing(s) to look at (the trusted scores above already ignore them)")
    lines.append(f"{'student':<16} {'lesson':<26} {'exercise':<30} why")
    lines += [f"{student:<16} {lesson:<26} {name:<30} {why}" for student, lesson, name, why in rows]
    return "\n".join(lines)
