"""Code that exits, never ends, eats memory, crashes the process or floods its output.

A fault costs only the step it happens in (a cell, or one exercise's checks): the grader
kills or restarts the child and goes on, and says what stopped it. A cell that couldn't run
to its end defines nothing, as a kernel that died would; an exception at the top of a cell,
after the definition, leaves the definition in place, as in Jupyter.
"""

from . import CORRECT_SA, CORRECT_SDPA, EXITED, LOOP_TIMEOUT, PASSES, SA, SDPA, case, code

TOO_SLOW = "did not finish within"
OUT_OF_MEMORY = "can't allocate memory"
TOO_MUCH_OUTPUT = "more output than allowed"


def _indented(lines, spaces):
    return "".join(" " * spaces + line + "\n" for line in code(lines).splitlines())


def _sdpa_whose_body_starts_with(lines):
    """The right answer, with ``lines`` run first on every call."""
    return CORRECT_SDPA.replace("    scores = ", _indented(lines, 4) + "    scores = ", 1)


def _self_attention_whose_forward_starts_with(lines):
    """The right module, with ``lines`` run first in every forward."""
    return CORRECT_SA.replace("        q, k, v = ", _indented(lines, 8) + "        q, k, v = ", 1)


@case(SDPA, deserved=6, says=("SystemExit", PASSES))
def sys_exit_at_the_top_of_the_cell(ctx):
    """A right answer whose cell then calls sys.exit(0), which Jupyter survives too: full marks, the SystemExit is reported."""
    return CORRECT_SDPA + "import sys\nsys.exit(0)\n"


@case(SA, deserved=0, says=(EXITED,))
def os_exit_at_the_top_of_the_cell(ctx):
    """A right module whose cell then calls os._exit(0), which kills the kernel, so nothing of the cell is left: 0, and the message says so."""
    return CORRECT_SA + "import os\nos._exit(0)\n"


@case(SA, deserved=0, says=("SystemExit",))
def sys_exit_in_forward(ctx):
    """A module whose forward calls sys.exit(0) instead of returning: 0, the SystemExit is reported."""
    return _self_attention_whose_forward_starts_with("import sys\nsys.exit(0)")


@case(SA, deserved=0, says=(EXITED,))
def os_exit_in_forward(ctx):
    """A module whose forward calls os._exit(0), ending the process with success: 0, not a pass."""
    return _self_attention_whose_forward_starts_with("import os\nos._exit(0)")


@case(SDPA, deserved=0, says=(TOO_SLOW,), timeout=LOOP_TIMEOUT)
def loops_forever_at_the_top_of_the_cell(ctx):
    """A right answer whose cell then loops forever, ignoring SIGINT and SIGTERM and catching every exception: 0, the timeout is named."""
    return CORRECT_SDPA + code('''
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            try:
                pass
            except BaseException:
                pass
    ''')


@case(SA, deserved=0, says=(TOO_SLOW,), timeout=LOOP_TIMEOUT)
def loops_forever_in_forward(ctx):
    """A module whose forward never returns: 0, the timeout is named."""
    return _self_attention_whose_forward_starts_with("while True:\n    pass")


@case(SA, deserved=0, says=(OUT_OF_MEMORY,))
def allocates_four_terabytes_in_forward(ctx):
    """A module whose forward asks torch.empty(10**12) on every call: 0, the failed allocation is reported."""
    return _self_attention_whose_forward_starts_with("hoard = torch.empty(10**12)")


@case(SDPA, deserved=6, says=(OUT_OF_MEMORY, PASSES))
def hoards_memory_at_the_top_of_the_cell(ctx):
    """A right answer whose cell then grows a list by 1 GiB tensors until memory runs out: stopped by the memory limit, full marks, the failure is reported."""
    return CORRECT_SDPA + code('''
        def _hoard():
            chunks = []
            while True:
                chunks.append(torch.empty(2**28))  # 1 GiB each


        _hoard()
    ''')


@case(SA, deserved=4, says=(OUT_OF_MEMORY, PASSES))
def writes_memory_at_the_top_of_the_cell(ctx):
    """A right module whose cell then fills 1 GiB tensors with ones, up to 12 GiB, in a warm server's fork as in a fresh interpreter: stopped by the memory limit, full marks, the failure is reported."""
    return CORRECT_SA + code('''
        def _fill():
            chunks = []
            for _ in range(12):
                chunks.append(torch.ones(2**28))  # 1 GiB each, every page written


        _fill()
    ''')


@case(SDPA, deserved=0, says=("SIGSEGV",))
def segfaults_at_the_top_of_the_cell(ctx):
    """A right answer whose cell then reads address 0 through ctypes, a segmentation fault that kills the kernel: 0, the crash is named."""
    return CORRECT_SDPA + "import ctypes\nctypes.string_at(0)\n"


@case(SA, deserved=0, says=("SIGABRT",))
def aborts_in_forward(ctx):
    """A module whose forward calls os.abort(): 0, the crash is named."""
    return _self_attention_whose_forward_starts_with("import os\nos.abort()")


@case(SDPA, deserved=0, says=(TOO_MUCH_OUTPUT,))
def prints_100_mb_at_the_top_of_the_cell(ctx):
    """A right answer whose cell then prints 100 MB, past the grader's 64 MiB output limit: the cell is stopped, 0, the limit is named."""
    return CORRECT_SDPA + 'print("x" * 100_000_000)\n'


@case(SA, deserved=0, says=(TOO_MUCH_OUTPUT,))
def prints_100_mb_in_forward(ctx):
    """A module whose forward prints 100 MB on each call: stopped at the output limit, 0, the limit is named."""
    return _self_attention_whose_forward_starts_with('print("x" * 100_000_000)')


@case(SDPA, deserved=6, says=(PASSES,))
def warns_on_stderr(ctx):
    """A right answer that prints warnings to stderr, from its cell and on every call: full marks."""
    return code('''
        import sys
        import warnings

        warnings.simplefilter("always")
        print("note: this cell is about to define attention", file=sys.stderr)
    ''') + _sdpa_whose_body_starts_with('warnings.warn("attention is computed the slow way", RuntimeWarning)\n'
                                        'print("computing attention", file=sys.stderr)')


@case(SA, deserved=4, says=(PASSES,))
def warns_through_logging_and_deprecations(ctx):
    """A right module that logs a warning and raises a DeprecationWarning on every call: full marks."""
    return code('''
        import logging
        import warnings
    ''') + "\n\n" + _self_attention_whose_forward_starts_with(
        'logging.getLogger("student").warning("forward is called")\n'
        'warnings.warn("this forward is deprecated", DeprecationWarning)')


def _detaches(marker):
    """Code that starts two processes meant to outlive the grader: a daemon (double fork, a session
    of its own) and a child in a new session, both running `sleep` with ``marker`` as its argument."""
    return code(f'''
        import os
        import subprocess

        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", {marker!r}])
            os._exit(0)
        subprocess.Popen(["sleep", {marker!r}], start_new_session=True)
    ''')


@case(SDPA, deserved=6, says=(PASSES,), leaves="7391.25")
def leaves_a_daemon_behind(ctx):
    """A right answer whose cell starts a daemon (a double fork in a session of its own) and a detached child, both sleeping for two hours: full marks, and neither outlives its grading."""
    return CORRECT_SDPA + _detaches("7391.25")


@case(SA, deserved=0, says=(TOO_SLOW,), timeout=LOOP_TIMEOUT, leaves="7391.5")
def leaves_processes_and_never_ends(ctx):
    """A module whose forward starts detached sleepers and then never returns: 0 for the timeout, and no process outlives the kill."""
    return _self_attention_whose_forward_starts_with(_detaches("7391.5") + "while True:\n    pass\n")
