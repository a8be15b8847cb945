"""Every exercise has two levels of hints, each in a folded cell, between its statement and its answer cell;
and a lesson whose checks run answers on the meta device says so, and why.

Students found that one hint cell that names the calls and counts the lines leaves little to work out
(issue 20). So each exercise now has, in this order:

1. **Hint 1: the idea**: which axis, which shape, what must stay equal, what the formula means; no code;
2. **Hint 2: the details**: the functions to call and the traps, but no count of the lines to write.

The rule holds in solutions/ and in the lessons/ that students open, for the lessons of HINTED_LESSONS.
Those lessons also state, where their exercises list the requirements, the one that lesson 08 left unsaid
(issue 20): answers run on PyTorch's meta device, and should be whole-tensor code (no `.item()`, ...).
"""

import copy
import re

import nbformat
import pytest

from autograder.checks.hidden import specs
from autograder.curriculum import LESSONS
from autograder.lessons import lesson_notebook, source_notebook

# The lessons whose exercises have the two levels of hints. To bring another lesson under the rule,
# add its name here.
HINTED_LESSONS = ["01_self_attention", "02_multi_head_attention", "03_positional_encoding", "04_encoder",
                  "05_decoder_masking", "06_full_model", "07_language_model", "08_modern_transformer", "09_open_weights"]

HINT_TITLES = ("Hint 1: the idea", "Hint 2: the details")
FOLDED = re.compile(r"<details>\n<summary><b>(?P<title>[^<]+)</b></summary>\n\n(?P<body>.*\S.*)\n\n</details>", re.S)
CALL_IN_CODE = re.compile(r"`[^`\n]*\w\([^`\n]*`")  # inline code that calls something: `x.transpose(-2, -1)`
LINE_COUNT = re.compile(r"\b(?:one|two|three|four|five|six|seven|eight|\d+)\s+lines?\b", re.I)
STATEMENT = re.compile(r"### Exercise \d+ · `(?P<name>\w+)`")


def exercises(lesson):
    return [exercise.name for exercise in LESSONS[lesson].exercises]


def hint_problems(nb, exercise):
    """What is wrong with the hints of `exercise` in notebook `nb`, in words; [] when nothing is."""
    answer = next(i for i, cell in enumerate(nb.cells)
                  if cell.metadata.get("nbgrader", {}).get("grade_id") == exercise)
    statements = [i for i, cell in enumerate(nb.cells[:answer])
                  if cell.cell_type == "markdown" and STATEMENT.match(cell.source)]
    if not statements or STATEMENT.match(nb.cells[statements[-1]].source)["name"] != exercise:
        return [f"no statement (### Exercise N · `{exercise}`) before the answer cell"]
    between = nb.cells[statements[-1] + 1:answer]
    folded = [FOLDED.fullmatch(cell.source.strip()) if cell.cell_type == "markdown" else None for cell in between]
    titles = [match["title"] if match else None for match in folded]
    if titles != list(HINT_TITLES):
        return [f"between its statement and its answer cell there must be exactly the folded cells "
                f"{list(HINT_TITLES)}, in that order; found {titles}"]
    (idea, details) = (match["body"] for match in folded)
    problems = []
    if "```" in idea or CALL_IN_CODE.search(idea):
        problems.append(f"'{HINT_TITLES[0]}' shows code: {(CALL_IN_CODE.search(idea) or ['```'])[0]}")
    for title, body in zip(HINT_TITLES, (idea, details)):
        if LINE_COUNT.search(body):
            problems.append(f"'{title}' counts the lines of the answer: {LINE_COUNT.search(body)[0]!r}")
    return problems


def test_hinted_lessons_are_lessons():
    assert set(HINTED_LESSONS) <= set(LESSONS), f"no such lessons: {set(HINTED_LESSONS) - set(LESSONS)}"


@pytest.mark.parametrize("notebook", [source_notebook, lesson_notebook], ids=["solutions", "lessons"])
@pytest.mark.parametrize("lesson, exercise", [(lesson, exercise) for lesson in HINTED_LESSONS
                                              for exercise in exercises(lesson)])
def test_every_exercise_has_the_idea_then_the_details(lesson, exercise, notebook):
    problems = hint_problems(nbformat.read(notebook(lesson), as_version=4), exercise)
    assert not problems, f"{notebook(lesson).parent.parent.name}/{lesson}, {exercise}: " + "; ".join(problems)


def hint_cells(nb, exercise):
    """The indices of the two hint cells of `exercise`, just before its answer cell."""
    answer = next(i for i, cell in enumerate(nb.cells) if cell.metadata.get("nbgrader", {}).get("grade_id") == exercise)
    return answer - 2, answer - 1


def one_old_hints_cell(nb, exercise):
    idea, details = hint_cells(nb, exercise)
    nb.cells[details].source = nb.cells[details].source.replace(HINT_TITLES[1], "Hints")
    del nb.cells[idea]


def swapped(nb, exercise):
    idea, details = hint_cells(nb, exercise)
    nb.cells[idea], nb.cells[details] = nb.cells[details], nb.cells[idea]


def code_in_the_idea(nb, exercise):
    idea, _ = hint_cells(nb, exercise)
    nb.cells[idea].source = nb.cells[idea].source.replace("\n\n</details>", "\n- Call `self.q_proj(x)`.\n\n</details>")


def line_count_in_the_details(nb, exercise):
    _, details = hint_cells(nb, exercise)
    nb.cells[details].source = nb.cells[details].source.replace("\n\n</details>", "\n- Three lines are enough.\n\n</details>")


def not_folded(nb, exercise):
    idea, _ = hint_cells(nb, exercise)
    nb.cells[idea].source = re.sub(r"</?details>|<summary>|</summary>", "", nb.cells[idea].source)


def after_the_answer(nb, exercise):
    idea, details = hint_cells(nb, exercise)
    hints = nb.cells[idea:details + 1]
    del nb.cells[idea:details + 1]
    nb.cells[idea + 1:idea + 1] = hints  # after the answer cell, before its check


@pytest.mark.parametrize("mistake", [one_old_hints_cell, swapped, code_in_the_idea, line_count_in_the_details,
                                     not_folded, after_the_answer])
def test_the_rule_catches(mistake):
    lesson = HINTED_LESSONS[0]
    nb = nbformat.read(source_notebook(lesson), as_version=4)
    exercise = exercises(lesson)[-1]
    assert hint_problems(nb, exercise) == []
    broken = copy.deepcopy(nb)
    mistake(broken, exercise)
    assert hint_problems(broken, exercise), f"{mistake.__name__} went unnoticed"


def meta_requirements(lesson):
    """The texts of the requirements of `lesson`'s exercises that its checks try on the meta device."""
    return [requirement.text for name in exercises(lesson) for requirement in specs()[name].requirements
            if "meta" in requirement.text]


@pytest.mark.parametrize("lesson", HINTED_LESSONS)
def test_a_lesson_checked_on_the_meta_device_says_so_and_why(lesson):
    if not meta_requirements(lesson):
        pytest.fail(f"{lesson}: no requirement mentions the meta device: does this test still read the checks right?")
    nb = nbformat.read(source_notebook(lesson), as_version=4)
    (intro,) = [cell.source for cell in nb.cells if cell.cell_type == "markdown" and cell.source.startswith("## Exercises")]
    for words in (r"\bmeta\b", r"no\s+values", r"\.item\(\)", r"\.tolist\(\)", r"on\s+a\s+GPU"):
        assert re.search(words, intro), (f"{lesson}: its requirements include {meta_requirements(lesson)[0]!r}, "
                                         f"but the '## Exercises' cell does not say that answers run on the meta "
                                         f"device and why (it lacks {words!r})")
