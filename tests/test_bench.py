"""The benchmark scripts run and print every row. Nothing here times anything: benchmarks
print figures for people to read (bench/), tests never assert on speed."""

import subprocess
import sys
from pathlib import Path

from autograder.curriculum import LESSONS
from lesson_tools.reversal import TrainingRun
from bench import nn_speed, notebooks, reversal
from bench.report import Row, summary

REPO = Path(__file__).resolve().parents[1]


def summary_rows(output, section):
    """The lines of the final summary table that belong to ``section``."""
    part = output.split("=== summary")[-1].splitlines()
    assert any(line.startswith("section ") and "| figure |" in line for line in part), output
    return [line for line in part if line.startswith(section)]


def test_nn_speed_smoke_prints_a_row_for_every_case():
    done = subprocess.run([sys.executable, "-m", "bench.all", "--only", "nn", "--smoke"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = summary_rows(done.stdout, "ref/torch.nn cpu")
    assert len(rows) == len(nn_speed.CASES), "\n".join(rows)
    for case, row in zip(nn_speed.CASES, rows):
        assert f"| {case.name} (" in row, row
        ratio = row.split("|")[2].strip()
        assert ratio.endswith("x") and float(ratio[:-1]) > 0, row
        if case.target is not None:
            assert f"target <= {case.target}x: " in row and row.rstrip().endswith(("PASS", "MISS")), row
    assert "1 CPU thread(s) (torch.get_num_threads())" in done.stdout


def test_reversal_rows_give_median_time_and_accuracy():
    runs = [TrainingRun(accuracy=a, seconds=s, cpu_seconds=s) for a, s in ((1.0, 50.0), (0.95, 70.0), (0.995, 40.0))]
    time_row, accuracy_row = reversal.rows(runs)
    assert time_row.figure == "50.0 s" and "MISS" not in time_row.note
    assert accuracy_row.figure == "99.5%" and "2 of 3 runs" in accuracy_row.note and "PASS" in accuracy_row.note


def test_every_graded_lesson_with_a_solution_is_benchmarked():
    names = notebooks.solution_notebooks()
    assert names == sorted(names)
    assert {n for n in LESSONS if (REPO / "solutions" / n / f"{n}.ipynb").is_file()} <= set(names)


def test_summary_table_has_one_line_per_row():
    rows = [Row("nbval", "01_self_attention", "12.3 s", "20 passed"), Row("grade", "06_full_model", "5.0 s")]
    lines = summary(rows).splitlines()
    assert len(lines) == 2 + len(rows)  # header, rule, rows
    assert [cell.strip() for cell in lines[2].split(" | ")] == ["nbval", "01_self_attention", "12.3 s", "20 passed"]
    assert len({line.index("|") for line in lines if "|" in line}) == 1, "columns line up"


def test_the_class_bench_grades_a_small_class_and_checks_every_score():
    done = subprocess.run([sys.executable, "-m", "bench.class_grading", "--students", "4", "--cold-students", "1",
                           "--lessons", "01_self_attention"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warm: 4 notebooks" in done.stdout and "cold: 1 notebooks" in done.stdout, done.stdout
    assert "problems:" not in done.stdout, done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("class ")]
    assert len(rows) == 3 and "s per notebook" in rows[0] and "fresh interpreters" in rows[1], rows


def test_the_class_bench_flags_a_score_that_does_not_fit_its_kind():
    from bench.class_grading import wrong_scores

    students = ["s000", "s001", "s002", "s003"]  # correct, stub, buggy, hostile
    fine = {("01_self_attention", "s000"): 10.0, ("01_self_attention", "s001"): 0.0,
            ("01_self_attention", "s002"): 4.0, ("01_self_attention", "s003"): 10.0}
    assert wrong_scores(fine, students) == []
    assert wrong_scores({**fine, ("01_self_attention", "s000"): 9.5}, students) == ["s000 01_self_attention (correct): 9.5"]
    assert wrong_scores({**fine, ("01_self_attention", "s001"): 2.0}, students) == ["s001 01_self_attention (stub): 2"]


def test_the_open_weights_bench_gives_the_equality_figures():
    from bench import open_weights

    rows = open_weights.equality_rows()
    figures = [float(row.figure) for row in rows]
    assert len(rows) == 3 and figures[0] < 1e-4 and figures[1] < 1e-5 and figures[2] < 1e-10
