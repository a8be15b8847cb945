"""Code that reaches outside its cell: fake result files, the gradebook, the course's files, the grader.

The child runs with the course folder and the temporary folder hidden, so what it reads
there isn't there and what it writes there lands in a throw-away folder. The paths these
cases aim at are real ones in the test's own folders (or a throw-away copy of the course),
never the repository itself, so a grader that fails them harms nothing.
"""

from pathlib import Path

from . import (CORRECT_SA, CORRECT_SDPA, EXITED, PASSES, SA, SDPA, WRONG_SA, WRONG_SDPA, answer, case, code,
               lesson_notebook, write, WRONG_SA_EARNS, WRONG_SDPA_EARNS)


def _appends(paths, text):
    """Code that appends ``text`` to each path, printing (not raising) when it can't."""
    return code(f'''
        for _path in {[str(p) for p in paths]!r}:
            try:
                with open(_path, "a") as _file:
                    _file.write({text!r})
            except OSError as error:
                print("blocked:", error)
    ''')


@case(SDPA, deserved=0, says=(EXITED,))
def writes_fake_results_into_its_cwd(ctx):
    """A wrong answer whose cell writes forged results (the stored public expected values) into the child's out/ folder, then exits: 0."""
    return WRONG_SDPA + code('''
        import os
        import torch
        from autograder.checks.public import load_public_data

        expected = load_public_data("01_self_attention")["scaled_dot_product_attention"]["expected"]
        os.makedirs("out", exist_ok=True)
        torch.save({"defined": True, "results": expected}, "out/exercise-scaled_dot_product_attention.pt")
        os._exit(0)
    ''')


@case(SA, deserved=4, says=(PASSES,), alone=True)
def writes_next_to_the_notebook(ctx):
    """A correct module whose cell drops forged grades next to the submitted notebook and overwrites the notebook: nothing there changes, full marks."""
    return CORRECT_SA + code(f'''
        import os
        try:
            os.makedirs({str(ctx.folder)!r}, exist_ok=True)
        except OSError as error:
            print("blocked:", error)
    ''') + _appends([ctx.folder / "grades.json", ctx.notebook], '{"SelfAttention": 4}')


@case(SDPA, deserved=WRONG_SDPA_EARNS, says=("FileNotFoundError",))
def reads_the_reference_from_the_repository(ctx):
    """A wrong answer whose cell replaces itself by the reference read from the repository's autograder/reference/: not there in the sandbox, what the wrong answer earns alone."""
    path = ctx.repo / "autograder" / "reference" / "attention.py"
    return WRONG_SDPA + code(f'''
        _namespace = {{}}
        exec(open({str(path)!r}).read(), _namespace)
        scaled_dot_product_attention = _namespace["scaled_dot_product_attention"]
    ''')


@case(SA, deserved=WRONG_SA_EARNS, says=("FileNotFoundError",))
def reads_the_hidden_checks_from_the_repository(ctx):
    """A wrong module whose cell reads the hidden checks and the reference from the repository's autograder/: not there in the sandbox, what the wrong answer earns alone."""
    hidden = ctx.repo / "autograder" / "checks" / "hidden" / "l01_self_attention.py"
    reference = ctx.repo / "autograder" / "reference" / "attention.py"
    return WRONG_SA + code(f'''
        _checks = open({str(hidden)!r}).read()
        _namespace = {{}}
        exec(open({str(reference)!r}).read(), _namespace)
        SelfAttention = _namespace["SelfAttention"]
    ''')


@case(SDPA, deserved=WRONG_SDPA_EARNS, says=("ModuleNotFoundError",))
def imports_the_reference(ctx):
    """A wrong answer whose cell then takes the reference's function from `import autograder.reference.attention`: no such module in the sandbox, what the wrong answer earns alone."""
    # Fetched by a string, so that the source check (which knows the name) leaves it to the sandbox.
    return WRONG_SDPA + code('''
        from autograder.reference import attention as reference
        scaled_dot_product_attention = vars(reference)["scaled_dot_product_" + "attention"]
    ''')


@case(SA, deserved=WRONG_SA_EARNS, says=("ModuleNotFoundError",))
def imports_the_hidden_checks(ctx):
    """A wrong module whose cell then imports the hidden checks, to take the reference they hold: no such module in the sandbox, what the wrong answer earns alone."""
    return WRONG_SA + "from autograder.checks.hidden.l01_self_attention import SelfAttention\n"


@case(SDPA, deserved=WRONG_SDPA_EARNS, says=("LookupError", "nothing to steal"))
def searches_memory_for_the_reference(ctx):
    """A wrong answer whose cell searches sys.modules and every live object for the reference or the hidden checks: there are none in the child, what the wrong answer earns alone."""
    return WRONG_SDPA + code('''
        import gc
        import sys

        _modules = [m for n, m in list(sys.modules.items()) if n.startswith(("autograder.reference", "autograder.checks.hidden"))]
        _functions = [o for o in gc.get_objects() if callable(o) and getattr(o, "__module__", None) == "autograder.reference.attention"]
        if not (_modules or _functions):
            raise LookupError("nothing to steal in sys.modules or gc")
        scaled_dot_product_attention = (_functions or [getattr(m, "scaled_dot_product_" + "attention") for m in _modules])[0]
    ''')


@case(SDPA, deserved=WRONG_SDPA_EARNS, says=("running the answer cell of scaled_dot_product_attention raised",))
def reads_the_reference_through_proc(ctx):
    """A wrong answer whose cell reads the reference through /proc/<grader>/root and /proc/1/root (the filesystem as the grader sees it): what the wrong answer earns alone, the attempt fails."""
    path = ctx.repo / "autograder" / "reference" / "attention.py"
    return WRONG_SDPA + code(f'''
        import os

        _namespace = {{}}
        for _pid in (os.getppid(), 1):
            try:
                exec(open(f"/proc/{{_pid}}/root{str(path)}").read(), _namespace)
                break
            except OSError:
                continue
        else:
            raise PermissionError("the grader's files are out of reach")
        scaled_dot_product_attention = _namespace["scaled_dot_product_attention"]
    ''')


@case(SA, deserved=4, says=(PASSES,), alone=True)
def writes_through_proc(ctx):
    """A correct module whose cell writes forged grades next to the submitted notebook, and over it, through /proc/<grader>/root and /proc/1/root: nothing there changes, full marks."""
    return CORRECT_SA + code('''
        import os
    ''') + code(f'''
        for _pid in (os.getppid(), 1):
            for _path, _text in (({str(ctx.folder / "forged-grades.json")!r}, '{{"SelfAttention": 4}}'), ({str(ctx.notebook)!r}, "{{}}")):
                try:
                    with open(f"/proc/{{_pid}}/root{{_path}}", "a") as _file:
                        _file.write(_text)
                except OSError as error:
                    print("blocked:", error)
    ''')


def _course_files(ctx):
    course = ctx.course
    return [course / "gradebook.db", course / "nbgrader_config.py", course / "autograder" / "checks" / "compare.py",
            ctx.notebook, ctx.folder / "forged-grades.json"]


def _gradebook_attack(course):
    return code(f'''
        import sqlite3
        try:
            _db = sqlite3.connect({str(course / "gradebook.db")!r})
            _db.execute("UPDATE grade SET auto_score = 100")
            _db.commit()
            _db.close()
        except sqlite3.Error as error:
            print("blocked:", error)
    ''')


@case(runner="process", place="course", deserved={SDPA: 6, SA: 4}, says={SDPA: (PASSES,), SA: (PASSES,)},
      watch=lambda ctx: [ctx.course])
def touches_the_gradebook_in_the_course_folder(ctx):
    """Correct answers whose cells raise every score in the course's gradebook.db, append to the grader's own compare.py, nbgrader_config.py and the notebook (`python -m autograder grade` in the course folder): nothing in the course changes, full marks."""
    sdpa = CORRECT_SDPA + _gradebook_attack(ctx.course)
    sa = CORRECT_SA + _appends(_course_files(ctx)[1:], "\ndef _close(*args, **kwargs):\n    return True\n")
    return write(lesson_notebook([answer(sdpa, SDPA)], [answer(sa, SA)]), ctx.notebook)


@case(place="outside", deserved={SDPA: 6, SA: 4}, says={SDPA: (PASSES,), SA: (PASSES,)},
      watch=lambda ctx: [ctx.course])
def touches_a_course_outside_the_repository(ctx):
    """Correct answers whose cells raise the scores in the gradebook.db of a course folder that is neither the repository nor the temporary folder, and rewrite the submission there: nothing there changes, full marks."""
    sdpa = CORRECT_SDPA + _gradebook_attack(ctx.course)
    sa = CORRECT_SA + _appends([ctx.course / "gradebook.db", ctx.notebook, ctx.folder / "forged-grades.json"], "{}")
    return write(lesson_notebook([answer(sdpa, SDPA)], [answer(sa, SA)]), ctx.notebook)


@case(runner="process", deserved={SDPA: 6, SA: 4}, says={SDPA: (PASSES,), SA: (PASSES,)})
def kills_the_grader(ctx):
    """Correct answers, one of whose cells sends SIGKILL to its parent process, the grader (`python -m autograder grade`): the grader lives on, full marks."""
    sdpa = CORRECT_SDPA + code('''
        import os
        import signal
        if os.getppid() > 1:
            os.kill(os.getppid(), signal.SIGKILL)
    ''')
    return write(lesson_notebook([answer(sdpa, SDPA)], [answer(CORRECT_SA, SA)]), ctx.notebook)


PLANTED = "planted_by_a_student"


def _planted_paths(ctx):
    """Where the planting case's code would leave files that outlive its job: the Python environment
    and the home folder (the student package is checked by the case itself)."""
    import site

    return [Path(site.getsitepackages()[0]) / f"zz_{PLANTED}.pth", Path.home() / f".{PLANTED}"]


@case(place="tmp", deserved={SDPA: 6, SA: 4}, says={SDPA: (PASSES,), SA: (PASSES,)}, watch=_planted_paths)
def plants_files_for_later_jobs(ctx):
    """Correct answers whose first cell writes into the student package the sandbox imports (which a warm server shares among all jobs), the Python environment's site-packages and the home folder, and whose second deletes its module if the planted file is there: all read-only, nothing left, full marks."""
    sdpa = CORRECT_SDPA + code(f'''
        import autograder
        import torch
        from pathlib import Path

        import site

        for _path in (Path(autograder.__file__).parent / "{PLANTED}.py",
                      Path(site.getsitepackages()[0]) / "zz_{PLANTED}.pth", Path.home() / ".{PLANTED}"):
            try:
                _path.write_text("# left by a student's code\\n")
            except OSError as error:
                print("blocked:", error)
    ''')
    sa = CORRECT_SA + code(f'''
        if (Path(autograder.__file__).parent / "{PLANTED}.py").exists():
            del SelfAttention
    ''')
    return write(lesson_notebook([answer(sdpa, SDPA)], [answer(sa, SA)]), ctx.notebook)


@case(SDPA, deserved=6, says=(PASSES,))
def signals_its_namespace_init(ctx):
    """A correct answer whose cell sends SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGKILL to its parent when that is PID 1 of its namespace (the process that waits for the job and ends the namespace with it): PID 1 takes none of them, full marks."""
    return CORRECT_SDPA + code('''
        import os
        import signal
        import time

        if os.getppid() == 1:  # in the sandbox's PID namespace, where the parent is its PID 1
            for _signal in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGKILL):
                os.kill(1, _signal)
                time.sleep(0.05)
    ''')
