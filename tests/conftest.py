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
