"""Grade a notebook: answer cells run in the sandbox, the verdict is computed here.

Nothing the student wrote is imported or executed in this process; it receives plain
tensors back and compares them with the reference (hidden checks) or with the stored
expected values (public checks).
"""

from dataclasses import dataclass, field

from ..checks.compare import Report, Tolerance, check_probes
from ..checks.forbidden import forbidden_message, forbidden_uses
from ..checks.public import failure_text, load_public_data, without_diagnosis
from ..curriculum import EXERCISES, callees
from . import sandbox
from .notebook import (SubmissionError, answer_cells, course_folder, duplicate_answer_cells, identify_lesson,
                       lesson_prelude, read_notebook)


@dataclass
class ExerciseGrade:
    score: float
    max: float
    messages: list = field(default_factory=list)
    requirements: dict = field(default_factory=dict)  # requirement key -> met, where the checks ran (pytest items)

    def as_dict(self):
        return {"score": self.score, "max": self.max, "messages": self.messages}


@dataclass
class NotebookGrade:
    lesson: str
    path: str
    exercises: dict  # name -> ExerciseGrade
    isolation: str = ""  # the sandbox's isolation the student code ran in (sandbox.Isolation.description)

    @property
    def score(self):
        return sum(g.score for g in self.exercises.values())

    @property
    def max(self):
        return sum(g.max for g in self.exercises.values())

    def as_dict(self):
        return {name: grade.as_dict() for name, grade in self.exercises.items()}


def _probes(name, hidden):
    if hidden:
        from ..checks.hidden import shared_probes

        return shared_probes(name)
    return load_public_data(EXERCISES[name].name)[name]["probes"]


def _report(name, probes, results, hidden, source):
    """The comparison of an exercise's results; ``source`` is its answer cell, which the rules read in the
    code decide on (lesson 03's "no Python loops"), never anything the student's process reports."""
    if hidden:
        from ..checks.hidden import report_for

        return report_for(name, probes, results, source)
    data = load_public_data(EXERCISES[name].name)[name]
    return check_probes(name, probes, results, data["expected"], lambda i: data["mistakes"][i],
                        Tolerance(*data["tolerance"]), data.get("requirements", ()), source)


def _callees(names, hidden):
    """{exercise: {"names", "source"}}: the reference's versions of what each exercise calls, which
    stand in for the student's when grading (the public check has no reference of this lesson)."""
    if not hidden:
        return {}
    from ..checks.hidden.callees import callee_source

    return {name: {"names": callees(name), "source": callee_source(name)} for name in names if callees(name)}


def _failing_callees(exercise, grades, to_run):
    """The exercises ``exercise`` calls that were graded here and lost points (public checks only: the student's
    own callees ran)."""
    return [callee for callee in exercise.calls
            if callee in grades and callee in to_run and grades[callee].score < grades[callee].max]


def _cell_error_message(name, error):
    trace = f"\n{error['traceback'].rstrip()}" if error.get("traceback") else ""
    return f"running the answer cell of {name} raised {error['type']}: {error['message']}{trace}"


def grade(path, hidden=True, lesson_name=None, step_timeout=60.0):
    """Grade one notebook; raises SubmissionError when it can't be graded at all."""
    notebook = read_notebook(path)
    lesson = identify_lesson(path, notebook, lesson_name)
    cells = answer_cells(notebook, lesson)
    if not cells:
        raise SubmissionError(f"{path}: no answer cells for lesson {lesson.name} (expected cells defining "
                              f"{', '.join(e.name for e in lesson.exercises)})")
    grades, to_run = {}, {}
    for exercise in lesson.exercises:
        if exercise.name not in cells:
            grades[exercise.name] = ExerciseGrade(0, exercise.points, [f"no answer cell for {exercise.name} was found"])
            continue
        used = forbidden_uses(cells[exercise.name], exercise.forbidden, own_names=EXERCISES)
        if used:
            grades[exercise.name] = ExerciseGrade(0, exercise.points, [forbidden_message(exercise.name, used)])
            continue
        to_run[exercise.name] = _probes(exercise.name, hidden)

    forbidden = {e.name: list(e.forbidden) for e in lesson.exercises}
    outcome = sandbox.run(lesson, lesson_prelude(lesson, notebook), cells, to_run, step_timeout=step_timeout,
                          forbidden=forbidden, hide=[course_folder(path)], callees=_callees(to_run, hidden))
    kind = "hidden" if hidden else "public"
    for exercise in lesson.exercises:
        name = exercise.name
        if name not in to_run:
            continue
        messages = []
        cell_failure = outcome.failures.get(f"cell {name}")
        if cell_failure:
            messages.append(f"running the answer cell of {name} {cell_failure}")
        if name in outcome.cell_errors:
            messages.append(_cell_error_message(name, outcome.cell_errors[name]))
        if f"exercise {name}" in outcome.failures:
            messages.append(f"checking {name}: {outcome.failures[f'exercise {name}']}")
            grades[name] = ExerciseGrade(0, exercise.points, messages)
            continue
        results = outcome.results.get(name)
        if results is None:
            grades[name] = ExerciseGrade(0, exercise.points, messages + [f"{name} is not defined after running its answer cell"])
            continue
        try:
            report = _report(name, to_run[name], results, hidden, cells[name])
        except Exception as exc:  # results from the child are checked for form, not for every field
            messages.append(f"checking {name}: its results could not be compared ({exc.__class__.__name__}); "
                            "they are not what the grader's child writes")
            grades[name] = ExerciseGrade(0, exercise.points, messages)
            continue
        if report.not_implemented:
            messages.append(f"{name} is not implemented yet")
        elif report.ok:
            messages.append(f"passes all {report.total} {kind} checks")
        else:
            if not hidden and _failing_callees(exercise, grades, to_run):  # the callee's failure says it all
                report = without_diagnosis(report)
            messages.extend(failure_text(report, kind, shown=3, points=exercise.points).splitlines())
        grades[name] = ExerciseGrade(report.score(exercise.points), exercise.points, messages,
                                     {key: requirement.met for key, requirement in report.requirements.items()})
    if not hidden:  # the student's own callees ran: say when one of them explains a failure
        for exercise in lesson.exercises:
            grade_ = grades[exercise.name]
            if grade_.score == grade_.max:
                continue
            for callee in _failing_callees(exercise, grades, to_run):
                grade_.messages.insert(0, f"{exercise.name} uses your {callee}, which fails its check: fix that "
                                          f"first (the grader checks {exercise.name} with a correct {callee}).")
    for name, count in duplicate_answer_cells(notebook, lesson).items():
        grades[name].messages.insert(0, f"{count} cells have grade_id {name}: only the first one is graded")
    return NotebookGrade(lesson.name, str(path), {e.name: grades[e.name] for e in lesson.exercises},
                         outcome.isolation.description)


__all__ = ["grade", "NotebookGrade", "ExerciseGrade", "SubmissionError", "Report"]
