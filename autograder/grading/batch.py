"""Grade a whole class with the trusted grader and record the scores in nbgrader's gradebook.

``python -m autograder autograde [LESSON ...]`` (``make autograde``) grades every
``submitted/<student>/<lesson>/`` notebook in parallel, writes each exercise's score as the
auto score of its test cell ``test_<exercise>`` (and the check messages as the automatic
comment of its answer cell), and prints a summary. Manual scores are never touched, so
regrading is idempotent and keeps them; each submission is written in one transaction, so an
interrupted run leaves the gradebook consistent; submitted files are only read; and a second
run while one is in progress is refused.
"""

import fcntl
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..curriculum import LESSONS
from ..lessons import scripts_on_path
from .grade import SubmissionError, grade

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


def _grade_one(student, lesson, path, step_timeout):
    try:
        result = grade(path, hidden=True, lesson_name=lesson, step_timeout=step_timeout)
    except SubmissionError as exc:
        return SubmissionResult(student, lesson, str(path), {}, str(exc))
    except Exception as exc:  # never lose the run over one notebook
        return SubmissionResult(student, lesson, str(path), {}, f"grading failed: {exc.__class__.__name__}: {exc}")
    scores = {name: (g.score, g.max, g.messages) for name, g in result.exercises.items()}
    return SubmissionResult(student, lesson, str(path), scores)


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
        submissions = find_submissions(root, lessons, students)
        with Gradebook(db_url, course_id) as gradebook:
            for name in {lesson for _, lesson, _ in submissions}:
                gradebook.find_assignment(name)  # MissingEntry: run nbgrader generate_assignment first
            jobs = jobs or os.cpu_count() or 1
            # Spawned, not forked: a forked worker would inherit the lock and hold it after a kill.
            with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = [pool.submit(_grade_one, s, l, p, step_timeout) for s, l, p in submissions]
                for future in tqdm(as_completed(futures), total=len(futures), desc="grading", unit="notebook",
                                   disable=not progress):
                    result = future.result()
                    record(gradebook, result)
                    results.append(result)
    return sorted(results, key=lambda r: (r.lesson, r.student))


def summary_table(results):
    """The run's results as text: one line per submission, then the class's totals per lesson."""
    lines = [f"{'lesson':<26} {'student':<16} {'score':>9}  notes"]
    for r in results:
        maximum = LESSONS[r.lesson].max_score
        failed = [name for name, (score, top, _) in r.scores.items() if score < top]
        notes = r.error or (("lost: " + ", ".join(failed)) if failed else "")
        lines.append(f"{r.lesson:<26} {r.student:<16} {r.score:>4g} / {maximum:<3g}  {notes}")
    lines.append(f"{len(results)} submission(s) graded")
    return "\n".join(lines)
