"""Lesson 01 as a student meets it: JupyterLab in a real browser.

A JupyterLab server starts on a free loopback port with a token, serving a copy of the
course as `make lab` would (the course's nbgrader_config.py, lesson 01 at
lessons/01_self_attention/). Headless Chromium (Debian's `chromium`, driven by Playwright)
then does what a student does:

1. opens lesson 01 and waits for its kernel;
2. runs all cells, and the first exercise's check fails with the check's own message;
3. presses nbgrader's Validate button, which says the notebook fails its tests;
4. types a wrong answer (no 1/sqrt(d_k)) into the answer cell, runs it and its check,
   and the check names the mistake;
5. types correct answers to both exercises, runs all cells again: both checks pass and
   the lesson's pictures are drawn;
6. validates again, and Validate (which saves first) says the notebook passes, and the
   notebook on disk holds the answers.

A screenshot of every step is saved in artifacts/browser/ (or $BROWSER_ARTIFACTS). The steps
share one page; after a failed step the later ones are reported as xfail (tests/conftest.py).

Without Chromium or Playwright the tests skip, except under CI (CI=true), where .ci/run
installs both and a missing browser is a failure.
"""

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import nbformat
import pytest

from tests.nbcells import cell_with_id, solution_code

REPO = Path(__file__).resolve().parent.parent
LESSON = "01_self_attention"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("BROWSER_ARTIFACTS", REPO / "artifacts" / "browser"))
# Flags for a machine with no display, no user namespaces for Chromium's sandbox, and a
# closed network (background fetches would fail, many at a time).
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update",
                  "--disable-gpu", "--no-first-run", "--disable-sync"]

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

_missing = [what for what, ok in (("chromium", CHROMIUM), ("playwright", sync_playwright)) if not ok]
if _missing:
    if os.environ.get("CI"):
        raise RuntimeError(f"CI must run the browser test, but {' and '.join(_missing)} is missing: "
                           "`.ci/run` installs chromium (apt-get) and requirements.txt has playwright")
    pytest.skip(f"no {' and '.join(_missing)} on this machine (apt-get install chromium)", allow_module_level=True)

pytestmark = [pytest.mark.timeout(600), pytest.mark.steps]

# Generous waits: the machine may be busy with the other half of the test suite.
KERNEL_START_MS = 90_000
RUN_ALL_MS = 180_000
VALIDATE_MS = 240_000
ERROR_OUTPUT = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"


# ---------------------------------------------------------------------------- the server


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _lab_settings(settings_dir):
    """JupyterLab user settings: no news or update checks (no network), every cell in the DOM."""
    overrides = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
        # Windowing renders only the cells on screen; the test reads cells anywhere.
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    }
    for relative, values in overrides.items():
        path = settings_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A copy of what `make lab` serves: the course's nbgrader config and lesson 01."""
    root = tmp_path_factory.mktemp("course")
    shutil.copy(REPO / "nbgrader_config.py", root)
    (root / "lessons" / LESSON).mkdir(parents=True)
    shutil.copy(REPO / "lessons" / LESSON / f"{LESSON}.ipynb", root / "lessons" / LESSON)
    return root


@pytest.fixture(scope="module")
def lab(course, tmp_path_factory):
    """JupyterLab serving `course` on a free loopback port; yields its base URL and token."""
    home = tmp_path_factory.mktemp("jupyter-home")
    _lab_settings(home / "settings")
    token = secrets.token_hex(24)
    port = _free_port()
    env = dict(os.environ,
               JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_DATA_DIR=str(home / "data"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), JUPYTER_TOKEN=token,
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    log_path = ARTIFACTS / "jupyterlab.log"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        # As `make lab` does: started in the course folder, so Validate reads its nbgrader_config.py.
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
             "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
             f"--ServerApp.root_dir={course}"],
            cwd=course, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(server, f"{base}/api/status?token={token}", log_path)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def _wait_for_server(server, url, log_path, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited with code {server.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"JupyterLab did not answer within {timeout} s:\n{log_path.read_text()[-3000:]}")


def test_server_refuses_requests_without_the_token(lab):
    base, _ = lab
    with pytest.raises(urllib.request.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/api/contents", timeout=10)
    assert refused.value.code == 403


# ---------------------------------------------------------------------------- the page


@pytest.fixture(scope="module")
def page(lab):
    base, token = lab
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(f"{base}/lab/tree/lessons/{LESSON}/{LESSON}.ipynb?token={token}")
        try:
            yield page
        finally:
            page.screenshot(path=ARTIFACTS / "last.png")
            browser.close()


def screenshot(page, name, cell=None):
    """Save a picture of the page (or of one cell, scrolled into view) as a test artifact."""
    path = ARTIFACTS / f"{name}.png"
    if cell is not None:
        cell.scroll_into_view_if_needed()
        cell.screenshot(path=path)
    else:
        page.screenshot(path=path)
    return path


def code_cell(page, text):
    """The one code cell whose source contains `text`."""
    cells = page.locator(".jp-Notebook .jp-CodeCell").filter(
        has=page.locator(".jp-InputArea-editor", has_text=text))
    expect(cells).to_have_count(1)
    return cells.first


def output_of(cell):
    return cell.locator(".jp-OutputArea").inner_text()


def run_all(page, attempts=3):
    """Run > Run All Cells, as a student would, until the first code cell reaches the kernel.

    A CI run once clicked the menu and nothing ran: the first cell kept its "[ ]:" prompt
    for 180 s. So the notebook is focused first (the menu acts on the current widget), the
    menu item must be enabled, and a click that starts nothing is reported and repeated.
    """
    first_prompt = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").first
    before = first_prompt.inner_text()
    for attempt in range(1, attempts + 1):
        page.locator(".jp-Notebook .jp-Cell").first.click()  # make the notebook the current widget
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        item = page.locator("li[data-command='runmenu:run-all']")
        expect(item).not_to_have_class(re.compile(r"lm-mod-disabled"))
        item.click()
        # "[ ]:" or "[n]:" before; "[*]:" once queued, then a higher number. A run that
        # never reached the kernel leaves the prompt as it was.
        try:
            expect(first_prompt).not_to_have_text(before, timeout=20_000 * attempt)
            if attempt > 1:  # passing, but visibly: the summary lists the warning
                warnings.warn(f"Run > Run All Cells started nothing until try {attempt} (screenshots in {ARTIFACTS})")
            return
        except AssertionError:
            screenshot(page, f"run_all_attempt_{attempt}_started_nothing")
    pytest.fail(f"Run > Run All Cells started nothing in {attempts} tries: the first code cell's "
                f"prompt stayed {before!r} (screenshots in {ARTIFACTS})")


def wait_until_idle(page, timeout):
    """Wait for the kernel to come back idle (the notebook toolbar's execution indicator)."""
    indicator = page.locator(".jp-Notebook-ExecutionIndicator")
    expect(indicator).to_have_attribute("data-status", "idle", timeout=timeout)


def wait_for_kernel(lab, page, timeout_ms):
    """Wait until the lesson's kernel has started, as the server sees it, and the page is idle.

    The page alone can't tell: JupyterLab draws the execution indicator as "idle" before it
    has asked for a kernel (2.5 s before, here), and Run All with no kernel yet may clear the
    cells and run nothing. That is the likely cause of a CI run in which Run All ran nothing.
    """
    base, token = lab
    deadline = time.monotonic() + timeout_ms / 1000
    states = []
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as response:
            sessions = json.load(response)
        states = [session["kernel"]["execution_state"] for session in sessions
                  if session["path"].endswith(f"{LESSON}.ipynb") and session.get("kernel")]
        if "idle" in states:
            wait_until_idle(page, timeout_ms)
            return
        time.sleep(0.25)
    pytest.fail(f"the lesson's kernel did not start within {timeout_ms / 1000:.0f} s "
                f"(the server's sessions for it: {states or 'none'})")


def type_into(page, cell, source):
    """Replace a cell's source the way a student would: click into it, select all, type."""
    editor = cell.locator(".jp-InputArea-editor .cm-content")
    editor.click()
    page.keyboard.press("Control+a")
    # insert_text types the text as one input event, so the editor's auto-indent and
    # bracket-closing do not rewrite it.
    page.keyboard.insert_text(source)
    page.keyboard.press("Escape")  # command mode, as after typing


def run_cell_and_next(page, cell):
    """Shift-Enter on `cell`: runs it and moves to the next cell."""
    cell.locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")


def validate(page):
    """Press nbgrader's Validate button (it saves the notebook first); return its dialog's text."""
    page.get_by_role("button", name="Validate").click()
    dialog = page.locator(".jp-Dialog-content")
    expect(dialog).to_be_visible(timeout=VALIDATE_MS)
    text = dialog.inner_text()
    return dialog, text


def close_dialog(page):
    page.locator(".jp-Dialog-content button").last.click()
    expect(page.locator(".jp-Dialog-content")).to_have_count(0)


# ---------------------------------------------------------------------------- the answers


def solution_sources():
    """The solution cells of lesson 01 as a student who solved them would have them."""
    notebook = nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    return {name: solution_code(cell_with_id(notebook, name).source) for name in (SDPA, "SelfAttention")}


SDPA = "scaled_dot_product_attention"
SDPA_CHECK = f'check("{SDPA}", {SDPA})'
SELF_ATTENTION_CHECK = 'check("SelfAttention", SelfAttention)'


# ---------------------------------------------------------------------------- the steps
# The steps share one page and run in order, as a student's session does.


def test_lesson_opens_with_a_running_kernel(page, lab):
    expect(page.locator(".jp-Notebook .jp-Cell").first).to_be_visible(timeout=KERNEL_START_MS)
    wait_for_kernel(lab, page, KERNEL_START_MS)
    expect(page.get_by_role("button", name="Validate")).to_be_visible()
    expect(page.locator(".jp-Notebook")).to_contain_text("Self-attention")
    screenshot(page, "1_opened")


def test_run_all_stops_at_the_stub_with_the_checks_message(page):
    run_all(page)
    check_cell = code_cell(page, SDPA_CHECK)
    expect(check_cell.locator(ERROR_OUTPUT)).to_be_visible(timeout=RUN_ALL_MS)
    wait_until_idle(page, RUN_ALL_MS)
    text = output_of(check_cell)
    assert f"NotImplementedError: `{SDPA}` is not implemented yet" in text, text
    # The cells before the exercise ran: the setup cell printed the device.
    setup = output_of(code_cell(page, 'print(f"Running on'))
    assert re.search(r"Running on (cpu|cuda)", setup), setup
    # Run All stops at the first error: the second exercise's check has not run.
    assert not output_of(code_cell(page, SELF_ATTENTION_CHECK)).strip()
    screenshot(page, "2_stub_fails", check_cell)


def test_validate_reports_the_failing_tests(page):
    dialog, text = validate(page)
    screenshot(page, "3_validate_fails")
    assert "Validation failed" in text or "failed" in text.lower(), text
    assert "NotImplementedError" in text, text
    close_dialog(page)


def test_a_wrong_answer_gets_its_mistake_named(page):
    correct = solution_sources()[SDPA]
    assert "/ math.sqrt(d_k)" in correct  # the wrong answer below drops this scale
    unscaled = correct.replace(" / math.sqrt(d_k)", "")
    answer_cell = code_cell(page, f"def {SDPA}(")
    type_into(page, answer_cell, unscaled)
    run_cell_and_next(page, answer_cell)
    check_cell = code_cell(page, SDPA_CHECK)
    page.keyboard.press("Shift+Enter")  # the check cell, now selected
    expect(check_cell.locator(ERROR_OUTPUT)).to_contain_text("CheckFailed", timeout=RUN_ALL_MS)
    text = output_of(check_cell)
    assert "Likely mistake" in text and "sqrt" in text, text
    screenshot(page, "4_wrong_answer_named", check_cell)


def test_correct_answers_pass_their_checks(page):
    answers = solution_sources()
    type_into(page, code_cell(page, f"def {SDPA}("), answers[SDPA])
    type_into(page, code_cell(page, "class SelfAttention("), answers["SelfAttention"])
    run_all(page)
    self_attention_check = code_cell(page, SELF_ATTENTION_CHECK)
    expect(self_attention_check.locator(".jp-OutputArea")).to_contain_text(
        "✓ SelfAttention passes", timeout=RUN_ALL_MS)
    wait_until_idle(page, RUN_ALL_MS)
    assert f"✓ {SDPA} passes all" in output_of(code_cell(page, SDPA_CHECK))
    errors = page.locator(ERROR_OUTPUT)
    assert errors.count() == 0, errors.first.inner_text()
    screenshot(page, "5_answers_pass", self_attention_check)
    # The lesson's pictures (the attention heatmaps, the saturation plot) are drawn on the page.
    images = page.locator(".jp-OutputArea-output img")
    assert images.count() >= 2
    for i in range(images.count()):
        image = images.nth(i)
        image.scroll_into_view_if_needed()
        size = image.evaluate("img => [img.complete, img.naturalWidth, img.naturalHeight]")
        assert size[0] and size[1] >= 200 and size[2] >= 100, f"picture {i} did not render: {size}"
    screenshot(page, "5_picture", code_cell(page, 'tokens = "the cat sat on the mat"'))


def test_validate_passes_and_the_answers_are_saved(page, course):
    dialog, text = validate(page)
    screenshot(page, "6_validate_passes")
    assert "Success" in text and "passes all the tests" in text, text
    close_dialog(page)
    saved = nbformat.read(course / "lessons" / LESSON / f"{LESSON}.ipynb", as_version=4)
    sources = [cell.source for cell in saved.cells]
    assert any(source.startswith(f"def {SDPA}(") and "math.sqrt(d_k)" in source for source in sources)
