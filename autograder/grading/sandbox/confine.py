"""What a grading job does to itself before any student code runs: its own namespaces, then no privilege.

This module runs inside the sandbox (the warm server and its jobs, a fresh child), so it imports
only the standard library and libseccomp's bindings. The order matters and never changes:

1. ``enter_namespaces`` (a warm job only; a fresh child gets its namespaces from bubblewrap): new
   user, mount, PID, network, IPC and UTS namespaces. The server writes the new user namespace's
   map (``write_id_maps``), since only a process of the parent namespace may map more than its own id.
2. ``private_mounts`` (the job's PID 1): a /proc of the new PID namespace, an empty size-limited
   /tmp and /dev/shm, /dev read-only, and the job's folder at /job with every other job's folder
   covered: nothing a job leaves behind is seen by the next.
3. ``drop_privileges`` (the process that runs the job): the unprivileged uid, every capability set
   empty (bounding and ambient included), ``no_new_privs``, then the seccomp filter. It checks the
   result in /proc/self/status and refuses to go on otherwise.
"""

import ctypes
import errno
import os

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
CLONE_NEWCGROUP = 0x02000000
NAMESPACES = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
EVERY_NEW_NAMESPACE = NAMESPACES | CLONE_NEWCGROUP

MAP_SHARED, MAP_SHARED_VALIDATE, MAP_TYPE = 0x01, 0x03, 0x0f  # mmap's flags: the mapping's type bits
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
ST_FLAGS = {os.ST_RDONLY: MS_RDONLY, os.ST_NOSUID: MS_NOSUID, os.ST_NODEV: MS_NODEV, os.ST_NOEXEC: MS_NOEXEC}

PR_SET_PDEATHSIG, PR_GET_SECCOMP, PR_CAPBSET_READ, PR_CAPBSET_DROP = 1, 21, 23, 24
PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 38, 39, 47
PR_CAP_AMBIENT_IS_SET, PR_CAP_AMBIENT_CLEAR_ALL = 1, 4

JOB_FOLDER = "/job"  # where a job finds its folder, whichever way it was started
JOBS_FOLDER = "/jobs"  # where a warm server finds the folders of its jobs
SERVER_PROC = "/.proc"  # a warm server's /proc of its own PID namespace (its /proc is the machine's)
PYTHON_HELD = "/.python"  # Python's folders that lie in /tmp, held where a job's own /tmp can't cover them
TMP_SIZE = "64m"  # each job's /tmp and /dev/shm

# What no exercise needs and an escape does: mounts and namespaces (a way back to the files the
# sandbox covers), tracing and reading other processes' memory, kernel keys, BPF, perf events, System
# V and POSIX message IPC (channels between jobs), loading modules, clocks, swap, reboot.
REFUSED_SYSCALLS = (
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace", "process_vm_readv", "process_vm_writev",
    "pidfd_getfd", "kcmp", "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl", "shmget", "shmat",
    "shmdt", "shmctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon",
    "swapoff", "syslog", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "quotactl",
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "iopl", "ioperm", "vhangup", "sethostname",
    "setdomainname", "personality", "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
    "setgroups", "setfsuid", "setfsgid", "capset",
)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def prctl(option, arg=0):
    _check(_libc().prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def die_with_parent(signal_number):
    prctl(PR_SET_PDEATHSIG, signal_number)


def unshare(flags):
    _check(_libc().unshare(flags), "unshare")


# ----------------------------------------------------------------------------- 1. namespaces
def id_maps(server_uid, server_gid, job_uid, job_gid):
    """The uid and gid maps a job's user namespace gets from a server running as ``server_uid``: the
    server's own id, and the job's unprivileged id when the server may map it (it is root)."""
    if server_uid == 0 and job_uid != 0:
        return f"0 0 1\n{job_uid} {job_uid} 1\n", f"0 0 1\n{job_gid} {job_gid} 1\n"
    return f"{server_uid} {server_uid} 1\n", f"{server_gid} {server_gid} 1\n"


def write_id_maps(pid, uid_map, gid_map, proc="/proc"):
    """From the parent namespace: map the ids of ``pid``'s new user namespace (``proc``: a /proc of the
    PID namespace ``pid`` is counted in)."""
    if uid_map.count("\n") == 1:  # an unprivileged map of one's own id needs setgroups denied first
        with open(f"{proc}/{pid}/setgroups", "w") as f:
            f.write("deny")
    with open(f"{proc}/{pid}/uid_map", "w") as f:
        f.write(uid_map)
    with open(f"{proc}/{pid}/gid_map", "w") as f:
        f.write(gid_map)


def enter_namespaces(ready_fd, mapped_fd):
    """New user, mount, PID, network, IPC and UTS namespaces for this process (a fork of the warm
    server); the server maps the ids once told through ``ready_fd``, and answers on ``mapped_fd``.
    The next process forked here is PID 1 of the new PID namespace."""
    unshare(CLONE_NEWUSER)
    os.write(ready_fd, b"u")
    if os.read(mapped_fd, 1) != b"m":
        raise OSError(errno.EPERM, "the server did not map the job's user namespace")
    os.close(ready_fd)
    os.close(mapped_fd)
    unshare(NAMESPACES & ~CLONE_NEWUSER)


# ----------------------------------------------------------------------------- 2. mounts
def mount(source, target, fstype=None, flags=0, data=None):
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    _check(_libc().mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
           f"mount {target}")


def _remount_read_only(target):
    """A bind remount keeps the flags the mount already has (the kernel refuses to clear locked ones)."""
    kept = os.statvfs(target).f_flag
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY
    for st_flag, ms_flag in ST_FLAGS.items():
        if kept & st_flag:
            flags |= ms_flag
    mount(None, target, None, flags)


def private_mounts(job_name, python_in_tmp=()):
    """In a job's new mount namespace (its PID 1): what no other job shares, and only its own folder.
    ``python_in_tmp``: the places in /tmp of Python's folders (held at PYTHON_HELD/N), put back on the
    job's own /tmp, read-only."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    try:  # the kernel allows it where the /proc below (the machine's, which the server has) is all visible
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
    except OSError:  # a container that masks parts of its /proc: then the job gets none
        mount("tmpfs", "/proc", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=555")
    mount(f"{JOBS_FOLDER}/{job_name}", JOB_FOLDER, None, MS_BIND | MS_REC)
    for covered in (JOBS_FOLDER, SERVER_PROC):
        mount("tmpfs", covered, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=755")
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMP_SIZE},mode=1777")
    for number, place in enumerate(python_in_tmp):
        os.makedirs(place, mode=0o755, exist_ok=True)
        mount(f"{PYTHON_HELD}/{number}", place, None, MS_BIND | MS_REC)
        _remount_read_only(place)
    _remount_read_only("/dev")
    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={TMP_SIZE},mode=1777")


# ----------------------------------------------------------------------------- 3. privilege
class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _last_capability():
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except OSError:
        return 40


def _drop_bounding_set():
    """Empty the capability bounding set (it needs CAP_SETPCAP, so before the uid changes)."""
    libc = _libc()
    for capability in range(_last_capability() + 1):
        if libc.prctl(PR_CAPBSET_READ, ctypes.c_ulong(capability), 0, 0, 0) != 1:
            continue  # not in the set (a process without CAP_SETPCAP may not even ask to drop it)
        if libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(capability), 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            _check(-1, "dropping the capability bounding set")


def _clear_capabilities():
    """Empty the ambient, inheritable, permitted and effective sets."""
    libc = _libc()
    libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")


def seccomp_filter():
    """The filter every job loads last: the refused system calls fail with EPERM, and clone may make no
    new namespace (clone3, whose flags a filter can't read, says it doesn't exist, so the C library
    falls back to clone). Built once in the warm server, loaded in each job."""
    import pyseccomp as seccomp

    refused = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in REFUSED_SYSCALLS:
        try:
            rules.add_rule(refused, name)
        except Exception:  # a call this architecture doesn't have
            pass
    for flag in (CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP):
        rules.add_rule(refused, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    try:
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    except Exception:
        pass
    return rules


def refuse_shared_mappings():
    """One more seccomp filter (filters only add up): ``mmap`` of shared memory fails with EPERM. For a job
    held to a memory budget, since RLIMIT_DATA counts private writable memory only."""
    import pyseccomp as seccomp

    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for shared in (MAP_SHARED, MAP_SHARED_VALIDATE):
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "mmap", seccomp.Arg(3, seccomp.MASKED_EQ, MAP_TYPE, shared))
    rules.load()


def held_privilege():
    """What privilege this process holds, asked of the kernel (no /proc needed): its uids, its five
    capability sets, no_new_privs and the seccomp mode."""
    libc = _libc()
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(libc.capget(ctypes.byref(header), data), "capget")
    sets = {"effective": 0, "permitted": 0, "inheritable": 0}
    for word, half in enumerate(data):
        for name in sets:
            sets[name] |= getattr(half, name) << (32 * word)
    bounding = sum(1 << cap for cap in range(_last_capability() + 1)
                   if libc.prctl(PR_CAPBSET_READ, ctypes.c_ulong(cap), 0, 0, 0) == 1)
    ambient = sum(1 << cap for cap in range(_last_capability() + 1)
                  if libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_IS_SET), ctypes.c_ulong(cap), 0, 0)
                  == 1)
    return {"uids": os.getresuid(), "capabilities": {**sets, "bounding": bounding, "ambient": ambient},
            "no_new_privs": libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0),
            "seccomp": libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0)}


class NotConfined(RuntimeError):
    """A job that could not drop its privilege: it must not run student code."""


def drop_privileges(uid, gid, rules):
    """Become ``uid``/``gid`` with no capability, no way to gain one, and the seccomp ``rules``; check it."""
    _drop_bounding_set()
    if os.getuid() != uid:  # root of the job's namespace (or of the machine) gives up its id
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    _clear_capabilities()
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if rules is not None:
        rules.load()
    held = held_privilege()
    if any(held["capabilities"].values()) or held["no_new_privs"] != 1 or set(held["uids"]) != {uid} \
            or (rules is not None and held["seccomp"] != 2):
        raise NotConfined(f"the job kept privilege: {held}")
