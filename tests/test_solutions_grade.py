"""The solution notebooks agree with the reference: the trusted grader gives each one full marks.

This grades the answer cells exactly as a student's submission is graded (sandboxed child,
hidden checks, the lesson's setup cell as the only other code), so it also proves that every
answer cell stands on its own.
"""

import pytest

from autograder.curriculum import LESSONS
from autograder.grading.grade import grade
from autograder.lessons import lessons_with_sources, source_notebook


@pytest.mark.parametrize("lesson", lessons_with_sources())
def test_solution_notebook_gets_full_marks(lesson):
    result = grade(source_notebook(lesson), hidden=True)
    lost = {name: g.messages for name, g in result.exercises.items() if g.score != g.max}
    assert not lost, lost
    assert result.score == LESSONS[lesson].max_score
