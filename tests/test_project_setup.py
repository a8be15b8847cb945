"""The project's own setup: pinned environments that agree, the installed packages, the
nbval sanitizers, and CI running the command the README gives."""

import re
import subprocess
import sys
import tomllib
from importlib import metadata

import pytest
import yaml
from nbval.plugin import get_sanitize_patterns
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from traitlets.config.loader import PyFileConfigLoader

from autograder.lessons import REPO


def pinned(lines):
    """{canonical name: version} of `name==version` requirement lines; fails on any other form."""
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", f"pin {line!r} exactly, with =="
        pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def requirements():
    return pinned((REPO / "requirements.txt").read_text().splitlines())


def conda_environment():
    return yaml.safe_load((REPO / "environment.yml").read_text())


def test_requirements_pin_torch():
    assert requirements()["torch"] == "2.13.0"


def test_environment_yml_lists_the_requirements():
    dependencies = conda_environment()["dependencies"]
    assert "python=3.11" in dependencies and "pip" in dependencies
    (pip_section,) = [item["pip"] for item in dependencies if isinstance(item, dict)]
    assert pinned(pip_section) == requirements()


@pytest.mark.parametrize("name", sorted(requirements()))
def test_installed_versions_are_the_pinned_ones(name):
    installed = Version(metadata.version(name))
    assert installed.public == requirements()[name], \
        f"{name} {installed} is installed, requirements.txt pins {requirements()[name]}: run `make venv`"


def test_kernels_import_the_autograder_of_this_checkout(tmp_path):
    """Notebooks run outside the repository root: `autograder` must be installed from here (`pip install -e .`)."""
    found = subprocess.run([sys.executable, "-c", "import autograder; print(autograder.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert found == str(REPO / "autograder" / "__init__.py"), \
        f"this Python imports autograder from {found or 'nowhere'}: run `make venv` (pip install -e .)"


def test_pyproject_ships_the_check_data():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "data/*.pt" in project["tool"]["setuptools"]["package-data"]["autograder.checks"]
    assert project["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]


def test_nbgrader_config_points_at_this_course():
    config = PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()
    assert config.CourseDirectory.root == str(REPO)
    assert (REPO / config.CourseDirectory.source_directory).is_dir()
    assert (REPO / config.CourseDirectory.release_directory).is_dir()


def sanitize(text):
    for regex, replace in get_sanitize_patterns((REPO / "nbval_sanitize.cfg").read_text()):
        text = re.sub(regex, replace, text)
    return text


@pytest.mark.parametrize("first, second", [
    ("Running on cpu", "Running on cuda"),
    ("Running on cpu (torch 2.13.0+cpu)", "Running on cuda:0 (torch 2.13.0+cu126)"),
    ("tensor([0.5000, 0.2500])", "tensor([0.5000, 0.2500], device='cuda:0')"),
    ("<Figure size 640x480 at 0x7f3a2c1d9e50>", "<Figure size 640x480 at 0x7f11aa0b2f10>"),
    ("100%|██████████| 50/50 [00:01<00:00, 38.51it/s]", "100%|██████████| 50/50 [00:02<00:00, 21.07it/s]"),
    ("trained in 1.23 s (4.5 ms a step)", "trained in 12.8 s (45 ms a step)"),
    ("/work/main/.venv/lib/python3.11/site-packages/torch/nn/functional.py:42: UserWarning",
     "/tmp/x/main/.venv/lib/python3.11/site-packages/torch/nn/functional.py:42: UserWarning"),
    ("✓ SelfAttention passes all 9 hidden checks", "✓ SelfAttention passes all 10 hidden checks"),
    ("largest difference from nn.Transformer: 8.3e-07", "largest difference from nn.Transformer: 7.2e-07"),
])
def test_sanitizers_erase_what_may_differ(first, second):
    assert first != second and sanitize(first) == sanitize(second)


@pytest.mark.parametrize("first, second", [
    ("tensor([0.5000, 0.2500])", "tensor([0.5000, 0.2501])"),
    ("torch.Size([2, 4, 8])", "torch.Size([2, 8, 4])"),
    ("loss 2.31 after 100 steps", "loss 2.41 after 100 steps"),
    ("Running on cpu: 3 tokens", "Running on cpu: 4 tokens"),
    ("✓ SelfAttention passes all 3 public checks", "✓ SelfAttention passes all 4 public checks"),
    ("largest difference from nn.Transformer: 8.3e-07", "largest difference from nn.Transformer: 8.3e-04"),
])
def test_sanitizers_keep_what_must_not_differ(first, second):
    assert sanitize(first) != sanitize(second)


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    subprocess.run(["bash", "-n", str(REPO / ".ci" / "run")], check=True)
    assert ci.rstrip().splitlines()[-1] == "make test"
    readme = (REPO / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme


def test_make_test_runs_the_tests_and_nbval():
    dry_run = subprocess.run(["make", "-n", "test"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
    assert re.search(r"pytest .*tests/", dry_run)
    assert re.search(r"pytest .*--nbval .*solutions/", dry_run)


def test_make_lab_serves_the_first_lesson_and_prints_its_url(tmp_path):
    """`make lab` as a student runs it: the printed link opens lesson 01, with a token."""
    import os
    import signal
    import socket
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, BROWSER="true",  # no browser to open here: the link is what we follow
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_DATA_DIR=str(tmp_path / "data"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    lab = subprocess.Popen(["make", "--no-print-directory", "lab", f"PORT={port}"], cwd=REPO, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        printed = []
        for line in lab.stdout:
            printed.append(line)
            if "token=" in line:
                break
        url = next((line.strip() for line in printed if "token=" in line), None)
        assert url, "".join(printed)
        assert url.startswith(f"http://127.0.0.1:{port}/lab/tree/lessons/01_self_attention/01_self_attention.ipynb?token=")
        token = url.split("token=")[1]
        contents = f"http://127.0.0.1:{port}/api/contents/lessons/01_self_attention/01_self_attention.ipynb"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{contents}?token={token}&content=0", timeout=5) as answer:
                    assert answer.status == 200
                    break
            except (urllib.error.URLError, ConnectionError):
                assert lab.poll() is None and time.monotonic() < deadline, "JupyterLab did not start"
                time.sleep(0.5)
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200 and "JupyterLab" in page.read().decode()
        with pytest.raises(urllib.error.HTTPError):  # and without the token, nothing
            urllib.request.urlopen(contents, timeout=10)
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)
