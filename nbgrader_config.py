"""nbgrader's configuration for this course (nbgrader 0.9.6).

Run nbgrader from this directory: it reads this file from the current directory.
solutions/ holds the source notebooks, lessons/ the student versions generated from
them (`make lessons`), and submitted/, autograded/, feedback/ and gradebook.db appear
here as a course is graded (all four are gitignored).
"""

import os

from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
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

# Autograding puts back any test cell a student deleted and runs it like the others.
# (Without this, a deleted test cell is left unscored, "needs manual grading".)
c.OverwriteCells.add_missing_cells = True

# A cell that runs longer than this is stopped and counts as failed, so that an endless
# loop in a submission cannot stall grading. The longest cell of the course, lesson 06's
# training, is meant to take under 120 s on two CPU cores; this leaves it room. Execute is
# nbgrader's autograder, ExecutePreprocessor nbconvert's (`jupyter nbconvert --execute`).
c.Execute.timeout = 180
c.ExecutePreprocessor.timeout = 180


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
