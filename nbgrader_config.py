"""nbgrader's configuration for this course (nbgrader 0.9.6).

Run nbgrader from this directory: it reads this file from the current directory.
solutions/ holds the source notebooks, lessons/ the student versions generated from
them (`make lessons`), and submitted/, autograded/, feedback/ and gradebook.db appear
here as a course is graded (all four are gitignored).
"""

import csv
import os

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.converters import GenerateAssignment
from nbgrader.plugins import CsvExportPlugin
from nbgrader.preprocessors import ClearHiddenTests, GetGrades, NbGraderPreprocessor

c = get_config()  # noqa: F821 (defined by the config loader)

# The course is the directory of this file, wherever nbgrader is started from. The
# gradebook stays at its default, <root>/gradebook.db.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "transformers-from-scratch"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "lessons"

# What a student sees in place of a solution: a stub that fails loudly and says why.
c.ClearSolutions.code_stub = {
    "python": "# YOUR CODE HERE\n"
              'raise NotImplementedError("Not written yet: replace these two lines with your code.")'
}
# `### BEGIN HIDDEN TESTS` ... `### END HIDDEN TESTS` never reaches students (the default,
# stated here because the grading depends on it).
c.ClearHiddenTests.enabled = True



class ClearWidgetState(NbGraderPreprocessor):
    """Drop the saved state of the solution run's widgets (tqdm's bars, hundreds of lines in
    metadata.widgets): a student notebook has no outputs to show them, so `make lessons` and
    `nbgrader generate_assignment` both write a lesson without it."""

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)
        return nb, resources


c.GenerateAssignment.preprocessors = GenerateAssignment.class_traits()["preprocessors"].default() + [ClearWidgetState]

# `make autograde` puts back any test cell a student deleted (in autograded/, with the trusted
# score as its output). Without this, a deleted test cell would be missing from the feedback page.
c.OverwriteCells.add_missing_cells = True

# Late submissions (docs/instructors.md, "Due dates and late submissions"): the due date is the
# assignment's (`nbgrader db assignment add <lesson> --duedate=...`), the time of a submission
# its timestamp.txt from `nbgrader collect`; `make autograde` applies this plugin's penalty.
# "none" records how late it is and takes nothing off; "zero" takes the whole score.
c.LateSubmissionPlugin.penalty_method = "none"

# A cell of plain `nbgrader autograde` or `jupyter nbconvert --execute` (not a step of the
# course's round, which runs no notebook outside the sandbox) that runs longer than this is
# stopped. The longest cell of the course, lesson 06's training, is meant to take under 120 s
# on two CPU cores; this leaves it room.
c.Execute.timeout = 180
c.ExecutePreprocessor.timeout = 180


class RoundedCsvExport(CsvExportPlugin):
    """nbgrader's CSV export, with the scores rounded to the hundredth the grader computes
    (a sum of per-exercise floats is otherwise written as 8.129999999999999)."""

    SCORES = ("raw_score", "late_submission_penalty", "score", "max_score")

    def export(self, gradebook):
        super().export(gradebook)
        path = self.to or "grades.csv"
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle))
        if not rows:
            return
        for row in rows:
            row.update({key: f"{round(float(row[key]), 2):g}" for key in self.SCORES if row.get(key)})
        with open(path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)


c.ExportApp.plugin_class = RoundedCsvExport


class ShortTracebacksInTestCells(NbGraderPreprocessor):
    """Cut an error in a test cell with hidden tests down to its last line ("CheckFailed: ...").

    IPython's traceback quotes the lines around the failing one, which can be the hidden
    tests; the last line is the check's own message, written for the student.
    """

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and "BEGIN HIDDEN TESTS" in cell.source:
            for output in cell.outputs:
                if output.output_type == "error":
                    output.traceback = output.traceback[-1:]
        return cell, resources


# Feedback shows a student their code, their outputs and their scores, but not the hidden
# tests: autograding puts them back into the notebook, so they are taken out again here
# (nbgrader shows them by default, jupyter/nbgrader#917), from the cells' code and from
# the tracebacks that quote it.
c.GenerateFeedback.preprocessors = [
    GetGrades, ShortTracebacksInTestCells, ClearHiddenTests, CSSHTMLHeaderPreprocessor,
]
