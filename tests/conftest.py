"""Fixtures shared by the tests that run notebooks and nbgrader."""

import os
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def jupyter_env(tmp_path_factory):
    """os.environ for running kernels and nbgrader, set for the rest of the session.

    Jupyter sees no personal configuration and no personal kernels, so that a notebook's
    "python3" kernel is this environment's Python; this Python's scripts come first on
    PATH (nbgrader runs `alembic` by name). Returns a copy for subprocesses.
    """
    home = tmp_path_factory.mktemp("jupyter")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_CONFIG_DIR", str(home / "config"))
        patch.setenv("JUPYTER_DATA_DIR", str(home / "data"))
        patch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        yield dict(os.environ)


# `make test` runs these files and the solution notebooks (nbval) in one pytest run, whole
# files handed to each core in turn (--dist loadfile --no-loadscope-reorder), in the order
# below: the longest first, so that no long file starts last while the other core idles.
# Seconds of one file on one core, from `pytest --durations=0` on 2 cores (2026-11-22).
LONGEST_FIRST = {
    "test_notebooks.py": 124,
    "test_adversarial.py": 104,  # and it grades on 2 processes of its own
    "test_trusted_autograde.py": 89,
    "test_pytest_plugin.py": 80,
    "test_sandbox.py": 75,
    "test_exchange_round.py": 60,
    "test_warm.py": 55,
    "test_release.py": 60,
    "test_checks.py": 40,
    "test_browser.py": 39,
    "test_grading.py": 39,
    "06_full_model.ipynb": 39,
    "test_nbgrader_end_to_end.py": 29,
    "test_progress.py": 26,
    "test_solutions_grade.py": 18,
    "04_encoder.ipynb": 15,
}


def pytest_collection_modifyitems(config, items):
    """Put the longest files first (see LONGEST_FIRST); the rest keep pytest's order after them."""
    rank = {name: i for i, name in enumerate(sorted(LONGEST_FIRST, key=LONGEST_FIRST.get, reverse=True))}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order


# A module marked `steps` is one story told in order (tests/test_browser.py: a student's
# session on one page). Once a step fails, the later ones would fail for that reason alone,
# with messages about the wrong thing; they are reported as xfail, naming the failed step.
_FAILED_STEP = {}  # test file: its first failed step


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and item.get_closest_marker("steps") is not None:
        _FAILED_STEP.setdefault(item.path, item.name)
    return report


def pytest_runtest_setup(item):
    if item.get_closest_marker("steps") is not None and item.path in _FAILED_STEP:
        pytest.xfail(f"not run: the earlier step {_FAILED_STEP[item.path]} failed, and this one builds on it")
