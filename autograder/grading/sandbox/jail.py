"""Where student code runs: which isolation this machine allows, and the bubblewrap command that gives it.

Three levels, the best one the machine allows, never chosen silently (each grade says which):

- ``full``: bubblewrap (Debian's ``bubblewrap``) builds a file system of read-only binds of the
  system's and Python's folders and nothing else (no course, no home folder, no other job, no
  /sys), with new mount, PID, network, IPC and UTS namespaces in a user namespace; the process
  that runs student code then takes an unprivileged uid, drops every capability, sets
  ``no_new_privs`` and loads the seccomp filter (confine.py). As root the user namespace maps
  root and the sandbox's uid (65534) to themselves, so the student's uid is the machine's 65534;
  as a plain user it maps that user.
- ``user``: where no namespace can be made (a container without CAP_SYS_ADMIN whose seccomp
  profile refuses user namespaces, as Docker's default does): root grades, and student code runs
  as uid 65534 with no capability, ``no_new_privs`` and the seccomp filter; the course folder is
  made unreadable to that uid first (what Gradescope advises for hidden tests).
- ``none``: a plain user without user namespaces, or not Linux: student code runs as the grader's
  user. ``make autograde`` refuses to write a gradebook so unless told to.

``AUTOGRADER_BWRAP`` names the bubblewrap program (default: ``bwrap`` on the PATH; empty: none),
``AUTOGRADER_SANDBOX_UID`` the uid student code gets when the grader is root.
"""

import fcntl
import functools
import os
import shutil
import signal
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import confine

SANDBOX_UID = int(os.environ.get("AUTOGRADER_SANDBOX_UID", "65534"))
PACKAGE_FOLDER = "/package"  # where the student package is mounted in the sandbox
# Read-only in the sandbox besides Python's own folders: the system's programs and libraries, and the
# few files of /etc that the dynamic loader and Python's standard library read.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/passwd",
                "/etc/group", "/etc/nsswitch.conf", "/etc/localtime")


@dataclass(frozen=True)
class Isolation:
    """What the sandbox gives student code on this machine. ``level``: "full", "user" or "none" (see the
    module's docstring); ``description`` says it in a sentence for grade reports."""

    level: str
    description: str

    @property
    def confined(self):
        """Whether jobs drop their privilege (and so need folders the sandbox's uid may use)."""
        return self.level in ("full", "user")


def job_ids():
    """The uid and gid student code runs as: the sandbox's own when the grader is root, else the grader's."""
    if os.geteuid() == 0:
        return SANDBOX_UID, SANDBOX_UID
    return os.getuid(), os.getgid()


def bwrap_program():
    name = os.environ.get("AUTOGRADER_BWRAP", "bwrap")
    return shutil.which(name) if name else None


# ----------------------------------------------------------------------------- the user namespace of root
def root_user_namespace():
    """As root: a new user namespace that maps root and the sandbox's uid (and gids) to themselves, as an
    open file for bubblewrap's --userns. Bubblewrap alone maps one id, and a sandbox uid mapped to the
    machine's root would own every root-owned file; with both mapped, the job's setuid is real."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # single-threaded, as unshare(CLONE_NEWUSER) requires
        try:
            os.close(ready_r)
            os.close(done_w)
            confine.unshare(confine.CLONE_NEWUSER)
            os.write(ready_w, b"u")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    try:
        if os.read(ready_r, 1) != b"u":
            raise OSError("no user namespace could be made")
        confine.write_id_maps(pid, *confine.id_maps(0, 0, SANDBOX_UID, SANDBOX_UID))
        opened = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        # Above the descriptors a shell's redirections use (0-9), so that a keeper shell leaves it alone.
        high = fcntl.fcntl(opened, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(opened)
        return high
    finally:
        os.write(done_w, b"d")
        os.close(done_w)
        os.close(ready_r)
        os.waitpid(pid, 0)


# ----------------------------------------------------------------------------- the command
def _python_binds():
    """(source, place) for Python's folders (the environment, the installation it was made from): each at
    its real path, and where a symlink leads to it (a worktree's .venv), at that path too, since the job's
    interpreter is started by the path the grader was."""
    binds = set()
    for path in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
                 Path(sys.executable).resolve().parent.parent):
        real = Path(path).resolve()
        binds.add((real, real))
        binds.add((real, Path(os.path.abspath(path))))
    return sorted(binds)


def python_under_tmp():
    """(source, place) of Python's folders that lie in /tmp, which a warm job's own /tmp would cover."""
    return [(source, place) for source, place in _python_binds() if Path("/tmp") in place.parents]


def _folders_to_bind():
    """Python's folders, by their real paths."""
    return sorted({real for real, _ in _python_binds()})


def _parents(path):
    return [str(parent) for parent in reversed(Path(path).parents) if str(parent) != "/"]


def bwrap_command(command, package, job=None, jobs=None, userns_fd=None):
    """``command`` in bubblewrap's sandbox: the student ``package`` at /package, and either one job's
    folder at /job (a fresh child) or a warm server's folder of jobs at /jobs (each job mounts its own
    at /job). Everything outside is read-only; /tmp is an empty tmpfs; /dev has the usual few devices."""
    argv = [bwrap_program()]
    if userns_fd is not None:
        argv += ["--userns", str(userns_fd)]
    else:
        argv += ["--unshare-user"]
    argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    made = set()

    def make_parents(path):
        for parent in _parents(path):
            if parent not in made:
                made.add(parent)
                argv.extend(["--perms", "0755", "--dir", parent])

    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):
            argv += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            argv += ["--ro-bind", folder, folder]
    for path in SYSTEM_FILES:
        if os.path.exists(path):
            make_parents(path)
            argv += ["--ro-bind", path, path]
    # A fresh child gets bubblewrap's /proc of its own PID namespace. A warm server gets the machine's,
    # read-only: the kernel lets a job mount a /proc of its own PID namespace only over one that is
    # all visible, and bubblewrap's hides parts of itself; each job covers it before student code runs.
    argv += ["--proc", "/proc"] if jobs is None else ["--ro-bind", "/proc", "/proc", "--proc", confine.SERVER_PROC]
    argv += ["--dev", "/dev", "--size", str(64 * 2**20), "--perms", "1777", "--tmpfs", "/tmp"]
    # After /tmp's tmpfs, which would cover an environment that lives there (a checkout in /tmp). A warm
    # job mounts a /tmp of its own too, so such folders are also held at /.python/N for it to put back.
    for source, place in _python_binds():
        if not any(str(place).startswith(system + "/") for system in SYSTEM_FOLDERS):
            make_parents(place)
            argv += ["--ro-bind", str(source), str(place)]
    for number, (source, _) in enumerate(python_under_tmp()):
        make_parents(f"{confine.PYTHON_HELD}/{number}/")
        argv += ["--ro-bind", str(source), f"{confine.PYTHON_HELD}/{number}"]
    for device in sorted(Path("/dev").glob("nvidia*")):  # a CUDA device, where there is one
        argv += ["--dev-bind", str(device), str(device)]
    argv += ["--ro-bind", str(package), PACKAGE_FOLDER]
    argv += ["--perms", "0755", "--dir", confine.JOB_FOLDER]
    if job is not None:
        argv += ["--bind", str(job), confine.JOB_FOLDER]
    if jobs is not None:
        argv += ["--bind", str(jobs), confine.JOBS_FOLDER]
    argv += ["--remount-ro", "/", "--chdir", confine.JOB_FOLDER if job is not None else "/", "--", *command]
    return argv


def popen(command, package, env, job=None, jobs=None, wrap=(), **kwargs):
    """Start ``command`` in the sandbox (bwrap_command), as root with the two-id user namespace;
    ``wrap`` is a command outside the sandbox that runs bubblewrap's (a keeper)."""
    userns_fd = root_user_namespace() if os.geteuid() == 0 else None
    try:
        argv = [*wrap, *bwrap_command(command, package, job=job, jobs=jobs, userns_fd=userns_fd)]
        return subprocess.Popen(argv, env=env, pass_fds=() if userns_fd is None else (userns_fd,), **kwargs)
    finally:
        if userns_fd is not None:
            os.close(userns_fd)


# ----------------------------------------------------------------------------- which level
def _readable_by_others(path):
    """Whether a user who is neither the owner nor in the group of ``path`` or its parents can reach it."""
    path = Path(path).resolve()
    for folder in [path, *path.parents]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            return False
    return bool(path.stat().st_mode & stat.S_IROTH)


def _reachable_by_others(program):
    """Whether a user who is neither owner nor group can run ``program`` (every folder above it entered)."""
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in [program, *program.parents])


def close_course(course):
    """At the ``user`` level: make the course folder unreadable to the sandbox's uid (root owns it and
    keeps reading it). Refused (False) when Python itself lives inside it, which would lock the
    jobs out of their interpreter."""
    course = Path(course).resolve()
    if any(course == folder or course in folder.parents for folder in _folders_to_bind()):
        return False
    if _readable_by_others(course):
        os.chmod(course, stat.S_IMODE(course.stat().st_mode) & ~0o007)
    return not _readable_by_others(course)


@functools.lru_cache(maxsize=None)
def _bwrap_works():
    """Whether bubblewrap starts a process in the sandbox here (and why not, when it doesn't)."""
    if not sys.platform.startswith("linux"):
        return False, "not Linux"
    if bwrap_program() is None:
        return False, "bubblewrap (bwrap) is not installed"
    try:
        process = popen(["true"], Path(sys.prefix), env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = process.communicate(timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap could not start ({exc.__class__.__name__})"
    if process.returncode != 0:
        return False, f"bubblewrap could not make its namespaces ({err.decode(errors='replace').strip()[:200]})"
    return True, ""


@functools.lru_cache(maxsize=None)
def isolation(course=None):
    """The best isolation this machine gives (see the module's docstring), computed once."""
    works, why_not = _bwrap_works()
    uid, _ = job_ids()
    if works:
        return Isolation("full", f"full: bubblewrap namespaces, uid {uid}, no capabilities, seccomp")
    python = Path(sys.executable).resolve()
    if os.geteuid() == 0 and sys.platform.startswith("linux") and not _reachable_by_others(python):
        why_not += f"; and uid {uid} cannot run {python}"
    elif os.geteuid() == 0 and sys.platform.startswith("linux"):
        from ...release import REPO

        closed = close_course(course or REPO)
        where = "the course closed to it" if closed else "the course still readable to it"
        return Isolation("user", f"user: uid {uid}, no capabilities, seccomp, {where}; no namespaces ({why_not})")
    return Isolation("none", f"none: student code runs as the grader's user, beside the course ({why_not})")


def kill_group(process):
    """SIGKILL a started sandbox's whole session (bubblewrap and everything under it)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            process.kill()
        process.wait()
