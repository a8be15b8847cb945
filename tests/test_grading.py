"""The grading CLI: trusted scores from a sandboxed child, clear errors for bad input."""

import json
import subprocess
import sys

import nbformat
import pytest

from autograder.__main__ import main
from autograder.grading.grade import grade
from tests.bug_catalog import all_bugs

SDPA = '''
def scaled_dot_product_attention(query, key, value, attn_mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights
'''
SELF_ATTENTION = '''
class SelfAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x, attn_mask=None):
        {body}
'''
CORRECT_FORWARD = ("q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)\n"
                   "        out, weights = scaled_dot_product_attention(q, k, v, attn_mask)\n"
                   "        return self.out_proj(out), weights")


def answer(source, grade_id):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3,
                                 "solution": True, "task": False}
    return cell


def write_notebook(path, cells):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# Self-attention")] + cells
    nbformat.write(notebook, path)
    return path


@pytest.fixture
def lesson_dir(tmp_path):
    return tmp_path


def submission(tmp_path, sdpa=SDPA, forward=CORRECT_FORWARD, name="01_self_attention.ipynb"):
    return write_notebook(tmp_path / name, [answer(sdpa, "scaled_dot_product_attention"),
                                            answer(SELF_ATTENTION.format(body=forward), "SelfAttention")])


def scores(result):
    return {name: g.score for name, g in result.exercises.items()}


def test_correct_answers_get_full_marks_and_a_bug_only_loses_its_exercise(tmp_path):
    result = grade(submission(tmp_path))
    assert scores(result) == {"scaled_dot_product_attention": 6, "SelfAttention": 4}
    bug = next(b for _, b in all_bugs() if b.exercise == "SelfAttention" and b.title == "drops the mask")
    buggy = write_notebook(tmp_path / "01_self_attention.ipynb",
                           [answer(SDPA, "scaled_dot_product_attention"), answer(bug.source, "SelfAttention")])
    result = grade(buggy)
    # The mask is one of SelfAttention's requirements, a quarter of its weight: 3 of its 4 points stay.
    assert scores(result) == {"scaled_dot_product_attention": 6, "SelfAttention": 3}
    assert any("not passed on" in m for m in result.exercises["SelfAttention"].messages)


def test_stubs_score_zero_and_say_not_implemented(tmp_path):
    path = submission(tmp_path, sdpa="def scaled_dot_product_attention(query, key, value, attn_mask=None):\n"
                                     "    raise NotImplementedError()\n", forward="raise NotImplementedError()")
    result = grade(path, hidden=False)
    assert scores(result) == {"scaled_dot_product_attention": 0, "SelfAttention": 0}
    assert all("not implemented yet" in g.messages[-1] for g in result.exercises.values())


def test_an_infinite_loop_costs_only_its_exercise(tmp_path):
    result = grade(submission(tmp_path, forward="while True:\n            pass"), step_timeout=3)
    assert scores(result) == {"scaled_dot_product_attention": 6, "SelfAttention": 0}
    assert "did not finish within 3 s" in " ".join(result.exercises["SelfAttention"].messages)


def test_a_loop_at_the_top_of_a_cell_and_a_dying_process_cost_only_their_exercise(tmp_path):
    path = submission(tmp_path, sdpa=SDPA + "\nwhile True:\n    pass\n", forward="import os; os.abort()")
    result = grade(path, step_timeout=3)
    assert scores(result) == {"scaled_dot_product_attention": 0, "SelfAttention": 0}
    assert "did not finish" in " ".join(result.exercises["scaled_dot_product_attention"].messages)
    assert "SIGABRT" in " ".join(result.exercises["SelfAttention"].messages)


def test_exit_calls_are_failures_not_the_end_of_grading(tmp_path):
    path = submission(tmp_path, sdpa=SDPA + "\nimport os\nos._exit(0)\n", forward="import sys; sys.exit(0)")
    result = grade(path, step_timeout=10)
    assert scores(result) == {"scaled_dot_product_attention": 0, "SelfAttention": 0}
    assert "exited" in " ".join(result.exercises["scaled_dot_product_attention"].messages)
    assert "SystemExit" in " ".join(result.exercises["SelfAttention"].messages)


def test_cells_without_metadata_are_found_by_what_they_define(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(SDPA), nbformat.v4.new_code_cell(SELF_ATTENTION.format(body=CORRECT_FORWARD))]
    path = tmp_path / "my_copy.ipynb"
    nbformat.write(notebook, path)
    result = grade(path, hidden=False, lesson_name="01_self_attention")
    assert scores(result) == {"scaled_dot_product_attention": 6, "SelfAttention": 4}


def test_the_cli_prints_json_keyed_by_exercise(tmp_path):
    path = submission(tmp_path, forward="return x, x")
    run = subprocess.run([sys.executable, "-m", "autograder", "check", str(path), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert set(report) == {"scaled_dot_product_attention", "SelfAttention"}
    assert report["scaled_dot_product_attention"] == {"score": 6, "max": 6, "messages": ["passes all 12 public checks"]}
    assert report["SelfAttention"]["score"] == 0 and report["SelfAttention"]["max"] == 4
    assert any("weights has shape" in m for m in report["SelfAttention"]["messages"])


@pytest.mark.parametrize("setup, expected", [
    (lambda d: d / "missing.ipynb", "no such file"),
    (lambda d: (d / "01_self_attention.ipynb").write_text("{not json") and d / "01_self_attention.ipynb", "not a notebook"),
    (lambda d: (d / "01_self_attention.ipynb").write_text('{"a": 1}') and d / "01_self_attention.ipynb", "not a notebook"),
    (lambda d: write_notebook(d / "homework.ipynb", []), "unknown lesson"),
    (lambda d: write_notebook(d / "01_self_attention.ipynb", []), "no answer cells"),
])
@pytest.mark.parametrize("command", ["grade", "check"])
def test_bad_input_gets_a_one_line_error_and_exit_code_2(tmp_path, capsys, setup, expected, command):
    path = setup(tmp_path)
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1, err


def test_an_unknown_lesson_name_is_refused(tmp_path, capsys):
    assert main(["grade", str(submission(tmp_path)), "--lesson", "07_diffusion"]) == 2
    assert "unknown lesson '07_diffusion'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["grade", "check"])
def test_the_ungraded_introduction_is_said_to_be_ungraded(command, capsys):
    assert main([command, "lessons/00_start_here/00_start_here.ipynb"]) == 0
    out = capsys.readouterr().out
    assert "ungraded introduction" in out and "01_self_attention" in out
