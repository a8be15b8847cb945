"""The sandbox's promises, tried from inside a job: no privilege, no escape, no channel to another job.

Each test runs student-like code in real jobs (a warm server's forks and fresh interpreters) and
reads what it saw from the error it raises, the only thing a job hands back besides results. The
levels of isolation are tried as an instructor meets them: as root, as root without CAP_SYS_ADMIN
(a container), as a plain user, and as root where no namespace can be made (``user``). Under CI
bubblewrap is installed (.ci/run), and nothing here is skipped for lack of it.
"""

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch

from autograder.curriculum import LESSONS
from autograder.grading import sandbox
from autograder.grading.grade import grade
from autograder.grading.sandbox import confine, readback
from autograder.release import REPO
from tests.adversarial import (CORRECT_SA, CORRECT_SDPA, SDPA, SA, WRONG_SDPA_EARNS, answer, lesson_notebook, write)

LESSON = LESSONS["01_self_attention"]
AS_ROOT = os.geteuid() == 0
needs_sandbox = pytest.mark.skipif(not sandbox.isolation_available() and not os.environ.get("CI"),
                                   reason="needs bubblewrap and Linux namespaces")
needs_root = pytest.mark.skipif(not AS_ROOT, reason="changes users: needs root")
x86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="system call numbers of x86_64")


def _seen_by_a_job(source, use_warm=True, cells=None):
    """What a cell running ``source`` reported (it raises RuntimeError(json of what it saw))."""
    cells = cells or {"probe": source}
    outcome = sandbox.run(LESSON, "import torch\n", cells, {"nothing": []}, use_warm=use_warm, step_timeout=60)
    errors = [outcome.cell_errors[name] for name in cells if name in outcome.cell_errors]
    assert errors and errors[-1]["type"] == "RuntimeError", (outcome.cell_errors, outcome.failures)
    return json.loads(errors[-1]["message"])


PRIVILEGE = '''
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
raise RuntimeError(json.dumps({key: status[key].split() for key in
                   ("Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")}))
'''


@needs_sandbox
@pytest.mark.parametrize("use_warm", [True, False], ids=["warm", "fresh"])
def test_a_job_holds_no_privilege(use_warm):
    seen = _seen_by_a_job("import json\n" + PRIVILEGE, use_warm)
    uid = 65534 if AS_ROOT else os.getuid()
    assert seen["Uid"] == [str(uid)] * 4 and "0" not in seen["Gid"], seen
    for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(seen[capabilities][0], 16) == 0, f"{capabilities} is {seen[capabilities]}"
    assert seen["NoNewPrivs"] == ["1"] and seen["Seccomp"] == ["2"], seen


ESCAPES = '''
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
def tried(result):
    return "allowed" if result >= 0 else errno.errorcode[ctypes.get_errno()]
seen = {}
seen["mount"] = tried(libc.mount(b"/", b"/tmp", None, 0x1000 | 0x4000, None))
seen["umount2"] = tried(libc.umount2(b"/proc", 2))
seen["unshare"] = tried(libc.unshare(0x10000000))
seen["setns"] = tried(libc.setns(os.open("/proc/self/ns/net", os.O_RDONLY), 0))
seen["chroot"] = tried(libc.chroot(b"/tmp"))
seen["ptrace"] = tried(libc.ptrace(16, 1, 0, 0))  # PTRACE_ATTACH to PID 1
for name, number in (("process_vm_readv", 310), ("keyctl", 250), ("bpf", 321), ("perf_event_open", 298),
                     ("shmget", 29), ("msgget", 68), ("semget", 64), ("setuid", 105), ("capset", 126),
                     ("userfaultfd", 323), ("clone3", 435)):
    seen[name] = tried(libc.syscall(number, 0, 0, 0, 0, 0))
child = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD)
if child == 0:
    os._exit(0)
seen["clone(CLONE_NEWUSER)"] = tried(child)
raise RuntimeError(json.dumps(seen))
'''


@needs_sandbox
@x86_64
@pytest.mark.parametrize("use_warm", [True, False], ids=["warm", "fresh"])
def test_the_system_calls_of_an_escape_are_refused(use_warm):
    seen = _seen_by_a_job(ESCAPES, use_warm)
    allowed = {name: result for name, result in seen.items() if result not in ("EPERM", "ENOSYS")}
    assert not allowed, f"the sandbox let these through: {allowed}"
    assert seen["clone3"] == "ENOSYS" and seen["mount"] == "EPERM"


LEAVE = '''
import ctypes, os, socket, subprocess
for place in ("/tmp/left-behind", "/dev/shm/left-behind", "/dev/left-behind", "/job/../left-behind",
              "/jobs/left-behind", os.path.expanduser("~/left-behind")):
    try:
        with open(place, "w") as f:
            f.write("the reference, say")
    except OSError:
        pass
listener = socket.socket(socket.AF_UNIX)
listener.bind("\\0left-behind")
listener.listen()
subprocess.Popen(["sleep", "600"], start_new_session=True)
os.environ["LEFT"] = "behind"
'''
FIND = '''
import json, os, socket
found = [place for place in ("/tmp/left-behind", "/dev/shm/left-behind", "/dev/left-behind", "/left-behind",
                             "/jobs/left-behind", os.path.expanduser("~/left-behind")) if os.path.exists(place)]
try:
    socket.socket(socket.AF_UNIX).connect("\\0left-behind")
    found.append("the abstract socket")
except OSError:
    pass
pids = [p for p in os.listdir("/proc") if p.isdigit()]
found += [f"process {open(f'/proc/{p}/cmdline').read()!r}" for p in pids if b"sleep" in open(f"/proc/{p}/cmdline", "rb").read()]
if os.environ.get("LEFT"):
    found.append("the environment")
raise RuntimeError(json.dumps({"found": found}))
'''


@needs_sandbox
@pytest.mark.parametrize("use_warm", [True, False], ids=["warm", "fresh"])
def test_nothing_a_job_leaves_reaches_the_next_job(use_warm):
    """The second job runs in a fork of the same warm server (or a fresh child) right after the first."""
    sandbox.run(LESSON, "import torch\n", {"leave": LEAVE}, {"nothing": []}, use_warm=use_warm)
    assert _seen_by_a_job(FIND, use_warm) == {"found": []}


SABOTAGE = '''
import glob, json, os, time
spoiled = []
deadline = time.monotonic() + 20
while time.monotonic() < deadline and not spoiled:
    for pattern in ("/proc/*/root/tmp/**/exercise-*.pt", "/proc/*/cwd/out/*.pt", "/proc/*/root/jobs/*/out/*.pt",
                    "/tmp/**/exercise-*.pt", "/jobs/*/out/*.pt", "/dev/shm/**/*.pt", "/var/tmp/**/exercise-*.pt",
                    "/proc/*/root/proc/*/cwd/out/*.pt"):
        for path in glob.glob(pattern, recursive=True):
            if "/job/out/" not in path:
                try:
                    open(path, "wb").write(b"spoiled")
                    spoiled.append(path)
                except OSError:
                    pass
    time.sleep(0.05)
raise RuntimeError(json.dumps({"spoiled": spoiled}))
'''


def _cli_grade(path, *env_pairs, wrapper=(), timeout=600):
    env = dict(os.environ, EXPOSE=EXPOSED, **dict(env_pairs))
    run = subprocess.run([*wrapper, sys.executable, "-m", "autograder", "grade", str(path), "--json"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


@needs_sandbox
def test_two_graders_at_once_cannot_reach_each_other(tmp_path):
    """A student's cell hunts for the other student's result files for 20 s while both are graded."""
    saboteur = write(lesson_notebook([answer(CORRECT_SDPA + SABOTAGE, SDPA)]), tmp_path / "eve" / "01_self_attention.ipynb")
    victim = write(lesson_notebook(), tmp_path / "ada" / "01_self_attention.ipynb")
    env = dict(os.environ)
    # A step limit well above the hunt's 20 s, so that a busy machine can't turn it into a time-out.
    attack = subprocess.Popen([sys.executable, "-m", "autograder", "grade", str(saboteur), "--json", "--timeout", "180"],
                              cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victims = [_cli_grade(victim) for _ in range(3)]  # graded again and again while the attack runs
    out, err = attack.communicate(timeout=600)
    assert attack.returncode == 0, err[-3000:]
    for report in victims:
        assert report[SDPA]["score"] == 6 and report[SA]["score"] == 4, report
    message = "\n".join(json.loads(out)[SDPA]["messages"])
    assert '{"spoiled": []}' in message, message


PROBE_NOTEBOOK_SA = CORRECT_SA + '''
_status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
if any(int(_status[key], 16) for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")) \\
        or "0" in _status["Uid"].split() or _status["Seccomp"].strip() != "2":
    del SelfAttention
'''
READ_THE_REFERENCE = '''
import autograder.release, pathlib
_repo = pathlib.Path({repo!r})
exec((_repo / "autograder" / "reference" / "attention.py").read_text())
'''


def _privilege_probe(tmp_path, repo=REPO):
    """A notebook whose SelfAttention is deleted unless its job is unprivileged, and whose
    scaled_dot_product_attention is a wrong one replaced by the reference read from ``repo``."""
    wrong = CORRECT_SDPA.replace(" / math.sqrt(query.size(-1))", "")
    sdpa = wrong + READ_THE_REFERENCE.format(repo=str(repo))
    return write(lesson_notebook([answer(sdpa, SDPA)], [answer(PROBE_NOTEBOOK_SA, SA)]), tmp_path / "01_self_attention.ipynb")


@needs_sandbox
@needs_root
def test_grading_in_a_container_without_cap_sys_admin(tmp_path):
    path = _privilege_probe(tmp_path)
    report = _cli_grade(path, wrapper=("setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--"))
    assert report[SA]["score"] == 4, report[SA]
    assert report[SDPA]["score"] == WRONG_SDPA_EARNS and any("FileNotFoundError" in m for m in report[SDPA]["messages"]), report[SDPA]


# In a mount namespace of its own, each folder of EXPOSE (colon-separated: the checkout, Python's environment
# and installation) is made reachable by every user: the topmost folder above it that others may not enter
# (/root, where pyenv installs Python on these machines; a checkout in a `mktemp -d` folder) is covered by an
# open tmpfs, and the folder is mounted back inside it. Nothing changes outside the namespace.
EXPOSE_PYTHON = '''
set -e
plan=""
IFS=:
for wanted in $EXPOSE; do  # first where each goes (before any mount changes the folders' modes)
    wanted=$(readlink -f "$wanted"); top=""; folder=$wanted
    while [ "$folder" != / ]; do
        folder=$(dirname "$folder")
        if [ "$folder" != / ] && [ $(( 0$(stat -c %a "$folder") & 1 )) -eq 0 ]; then top=$folder; fi
    done
    if [ -n "$top" ]; then plan="$plan$top:$wanted
"; fi
done
unset IFS
printf %s "$plan" | while IFS=: read -r top wanted; do
    held=/mnt/.exposed$(echo "$top" | tr / _)
    if ! mountpoint -q "$held"; then  # (the empty folder itself may be left by an earlier run)
        mkdir -p "$held" && mount --bind "$top" "$held" && mount -t tmpfs -o mode=755 none "$top"
    fi
    mkdir -p "$wanted" && mount --bind "$held/${wanted#"$top"/}" "$wanted"
done
'''
EXPOSED = ":".join(str(path) for path in (REPO, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()))
AS_A_PLAIN_USER = EXPOSE_PYTHON + '''
exec setpriv --reuid 1000 --regid 1000 --clear-groups --inh-caps=-all --bounding-set=-all env HOME="$HOME_1000" "$@"
'''
AS_ROOT_WITH_PYTHON_EXPOSED = EXPOSE_PYTHON + '''
exec "$@"
'''


@pytest.fixture
def open_folder():
    """A folder in the temporary folder that every user may enter (pytest's own are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@needs_sandbox
@needs_root
def test_grading_as_a_plain_user(open_folder):
    """As uid 1000, in a mount namespace where /root lets it reach this machine's Python (installed under
    /root, which is private): bubblewrap makes its user namespace unprivileged."""
    home = open_folder / "home"
    home.mkdir()
    os.chown(home, 1000, 1000)
    path = _privilege_probe(open_folder / "eve")
    os.chmod(path.parent, 0o755)
    os.chmod(path, 0o644)
    report = _cli_grade(path, ("HOME_1000", str(home)), wrapper=("unshare", "-m", "sh", "-c", AS_A_PLAIN_USER, "sh"))
    assert report[SA]["score"] == 4, report[SA]
    assert report[SDPA]["score"] == WRONG_SDPA_EARNS, report[SDPA]


@needs_root
def test_where_no_namespace_can_be_made_jobs_still_drop_to_an_unprivileged_uid(open_folder):
    """Root without bubblewrap (a container that refuses namespaces): the ``user`` level. The course (a
    copy, as Gradescope's /autograder/source, with Python outside it) is closed to the sandbox's uid."""
    tmp_path = open_folder
    course = tmp_path / "course"
    for package in ("autograder", "lesson_tools"):
        shutil.copytree(REPO / package, course / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "solutions" / LESSON.name, course / "solutions" / LESSON.name)
    submission = tmp_path / "submission"
    path = _privilege_probe(submission, repo=course)
    env = dict(os.environ, AUTOGRADER_BWRAP="", PYTHONPATH=str(course), EXPOSE=EXPOSED)
    wrapper = ("unshare", "-m", "sh", "-c", AS_ROOT_WITH_PYTHON_EXPOSED, "sh")
    run = subprocess.run([*wrapper, sys.executable, "-m", "autograder", "grade", str(path), "--json"], cwd=course,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report[SA]["score"] == 4, report[SA]
    assert report[SDPA]["score"] == WRONG_SDPA_EARNS and any("PermissionError" in m for m in report[SDPA]["messages"]), report[SDPA]
    assert not os.stat(course).st_mode & 0o007, "the course is still open to other users"
    code = ("from autograder.grading.sandbox import isolation; print(isolation().description)")
    level = subprocess.run([*wrapper, sys.executable, "-c", code], cwd=course, env=env, capture_output=True, text=True)
    assert level.stdout.startswith("user: uid 65534, no capabilities, seccomp, the course closed to it"), level


@needs_sandbox
def test_the_grade_names_the_isolation_it_got(tmp_path):
    path = write(lesson_notebook(), tmp_path / "01_self_attention.ipynb")
    result = grade(path)
    assert result.score == LESSON.max_score
    assert result.isolation.startswith("full: bubblewrap namespaces, uid"), result.isolation


# ----------------------------------------------------------------------------- reading what a job wrote
def _saved(tmp_path, value, name="record.pt"):
    path = tmp_path / name
    torch.save(value, path)
    return path


def test_plain_bounded_data_reads_back_as_it_was(tmp_path):
    data = {"results": [{"ok": True, "outputs": [torch.arange(6.0).reshape(2, 3)], "error": None}]}
    loaded = readback.load(_saved(tmp_path, data))
    assert torch.equal(loaded["results"][0]["outputs"][0], torch.arange(6.0).reshape(2, 3))


def test_a_compressed_record_is_refused_before_it_is_inflated(tmp_path):
    path = _saved(tmp_path, {"message": torch.zeros(4)})
    with zipfile.ZipFile(path) as archive:
        records = {info.filename: archive.read(info) for info in archive.infolist()}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in records.items():
            archive.writestr(name, data)
    with pytest.raises(readback.Unreadable, match="compressed"):
        readback.load(path)


def test_a_shared_list_is_refused_however_small_its_pickle(tmp_path):
    shared = ["x"]
    for _ in range(7):
        shared = [shared] * 10
    path = _saved(tmp_path, {"message": shared})
    assert path.stat().st_size < 10_000
    with pytest.raises(readback.Unreadable, match="more than"):
        readback.load(path)


def test_a_tensor_viewed_over_a_smaller_storage_is_refused(tmp_path):
    one = torch.zeros(1).as_strided((10**9,), (0,))
    with pytest.raises(readback.Unreadable):
        readback.load(_saved(tmp_path, {"outputs": [one]}))


def test_messages_are_cut_and_only_strings_pass(tmp_path):
    record = readback.cell_error(readback.load(_saved(tmp_path, {"type": "E", "message": "m" * 100_000,
                                                                 "traceback": "t" * 10})))
    assert len(record["message"]) == readback.MESSAGE_LIMIT
    assert readback.cell_error({"type": "E", "message": ["not", "a", "string"]})["message"] == \
        "its record is not plain data"


def test_a_pickle_larger_than_the_limit_is_refused(tmp_path):
    with pytest.raises(readback.Unreadable, match="pickle"):
        readback.load(_saved(tmp_path, {"message": "x" * (readback.PICKLE_LIMIT + 10)}))


def test_the_seccomp_filter_names_only_calls_this_machine_has():
    rules = confine.seccomp_filter()
    assert rules is not None
    assert "mount" in confine.REFUSED_SYSCALLS and "ptrace" in confine.REFUSED_SYSCALLS


# ----------------------------------------------------------------------------- what the instructor is shown
def test_the_integrity_table_shows_each_way_past_the_guards():
    from autograder.grading.integrity import tampering

    hatches = {
        "import ctypes": "ctypes",
        "kernel = torch._C._nn.scaled_dot_product_attention": "torch._C",
        "from torch.utils._python_dispatch import _disable_current_modes": "torch.utils._python_dispatch",
        "op = getattr(torch.ops.aten, name)": "torch.ops",
        "import importlib": "importlib",
        "sys.modules['autograder.checks.runner']._counting = None": "sys.modules",
        "f.__code__ = g.__code__": "__code__",
        "import gc": "gc",
    }
    for line, hatch in hatches.items():
        assert (1, f"reaches past the grader's guards: {hatch}") in tampering(line), line
    honest = "def forward(self, x):\n    act = getattr(F, self.activation)\n    return self.linear2(act(self.linear1(x)))\n"
    assert tampering(honest) == []


@needs_sandbox
def test_a_decompression_bomb_left_by_a_job_never_inflates_in_the_grader(tmp_path):
    """The grader's own peak memory stays far below the 1 GiB the forged record inflates to."""
    from tests.adversarial.privilege import forges_a_decompression_bomb_as_its_cell_record as bomb

    cell = bomb(None)
    path = write(lesson_notebook([answer(cell, SDPA)]), tmp_path / "01_self_attention.ipynb")
    measure = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    run = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "autograder", "grade", str(path)],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    peak_kib = int(run.stdout.split()[-1])
    assert peak_kib < 900 * 1024, f"the grader peaked at {peak_kib / 1024:.0f} MiB"
