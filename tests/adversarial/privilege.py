"""Code that uses the privilege a job might hold, forbidden kernels by other names, and forged job files.

Each case is what worked before the sandbox dropped privilege: a job ran as root with every
capability, the forbidden-call guard was a TorchFunctionMode, and the grader loaded any file a job
left. tests/test_sandbox.py proves the same rules directly (system calls, channels between jobs,
two graders at once, the isolation levels).
"""

from . import CORRECT_SA, EXITED, PASSES, SA, SDPA, SWITCHED_OFF, UNSCALED, WRONG_SA, WRONG_SDPA, case, code, WRONG_SDPA_EARNS

REFUSED = "refused by the sandbox"


@case(SDPA, deserved=WRONG_SDPA_EARNS, says=(UNSCALED, REFUSED))
def mounts_the_disk_again_to_read_the_reference(ctx):
    """A wrong answer whose cell bind-mounts / again under its folder, remounts it read-write and executes the reference found there (what root with CAP_SYS_ADMIN could): mount(2) is refused, what the wrong answer earns alone."""
    return WRONG_SDPA + code(f'''
        import ctypes, os
        _libc = ctypes.CDLL(None, use_errno=True)
        os.makedirs("again", exist_ok=True)
        if _libc.mount(b"/", b"again", None, 0x1000 | 0x4000, None) != 0:  # MS_BIND | MS_REC
            raise OSError(ctypes.get_errno(), "mount {REFUSED}: " + os.strerror(ctypes.get_errno()))
        _libc.mount(None, b"again", None, 0x20 | 0x1000, None)  # MS_REMOUNT | MS_BIND: read-write
        for _root, _dirs, _files in os.walk("again"):
            if _root.endswith("autograder/reference") and "attention.py" in _files:
                exec(open(os.path.join(_root, "attention.py")).read())
                break
    ''')


@case(SA, deserved=4, says=(PASSES,))
def keeps_its_answer_only_without_privilege(ctx):
    """A correct module whose cell deletes it unless /proc/self/status shows an unprivileged uid, no capability in any set, no_new_privs and a seccomp filter: the job holds no privilege, full marks."""
    return CORRECT_SA + code('''
        _status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        _caps = [int(_status[key], 16) for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
        if any(_caps) or "0" in _status["Uid"].split() or _status["NoNewPrivs"].strip() != "1" \\
                or _status["Seccomp"].strip() != "2":
            del SelfAttention
    ''')


@case(SDPA, deserved=0, says=(SWITCHED_OFF,))
def calls_the_forbidden_kernel_by_string_past_every_mode(ctx):
    """An answer that computes its weights itself but its output with `getattr(torch._C._nn, "scaled_dot_" + "product_attention")` under `DisableTorchFunction()` and `_disable_current_modes()`: the kernel is refused at the dispatcher, 0."""
    return code('''
        def scaled_dot_product_attention(query, key, value, attn_mask=None):
            from torch.utils._python_dispatch import _disable_current_modes
            scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., L, S)
            if attn_mask is not None:
                scores = scores.masked_fill(attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
            weights = scores.softmax(dim=-1)
            kernel = getattr(torch._C._nn, "scaled_dot_" + "product_attention")
            keep = None if attn_mask is None else (~attn_mask if attn_mask.dtype == torch.bool else attn_mask)
            with torch._C.DisableTorchFunction(), _disable_current_modes():
                output = kernel(query, key, value, attn_mask=keep)
            return output, weights
    ''')


@case(SA, deserved=0, says=(SWITCHED_OFF,))
def calls_the_math_kernel_through_torch_ops(ctx):
    """A module whose forward takes output and weights from `getattr(torch.ops.aten, "_scaled_dot_product_attention_" + "math")` under `DisableTorchFunction()`: refused at the dispatcher, 0."""
    return CORRECT_SA.replace("    def forward(self, x, attn_mask=None):\n", '''    def forward(self, x, attn_mask=None):
        kernel = getattr(torch.ops.aten, "_scaled_dot_product_attention_" + "math")
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # (B, T, C) each
        keep = None if attn_mask is None else (~attn_mask if attn_mask.dtype == torch.bool else attn_mask)
        with torch._C.DisableTorchFunction():
            output, weights = kernel(q, k, v, attn_mask=keep)
        return self.out_proj(output), weights
''')


def _forge_then_exit(exercise, record_code):
    """Cell code that writes ``record_code``'s file as the grader's record of ``exercise``'s cell, then exits
    (so that the child never writes its own record over it)."""
    return code(f'''
        import io, os, pickle, zipfile, zlib
        os.makedirs("out", exist_ok=True)
        _path = os.path.join("out", "cell-{exercise}.pt")
    ''') + code(record_code) + "os._exit(0)\n"


@case(SDPA, deserved=0, says=(EXITED,))
def forges_a_decompression_bomb_as_its_cell_record(ctx):
    """A wrong answer whose cell leaves a 1 MB record whose DEFLATE-compressed storage inflates to 1 GiB, then exits: the grader refuses compressed records and never inflates it, 0."""
    return WRONG_SDPA + _forge_then_exit(SDPA, '''
        import torch
        torch.save({"type": "x", "message": torch.zeros(1)}, _path)
        with zipfile.ZipFile(_path) as _zip:
            _records = {info.filename: _zip.read(info) for info in _zip.infolist()}
        with zipfile.ZipFile(_path, "w", compression=zipfile.ZIP_DEFLATED) as _zip:
            for _name, _data in _records.items():
                if _name.endswith("/data/0"):
                    with _zip.open(_name, "w", force_zip64=True) as _record:
                        for _ in range(1024):
                            _record.write(bytes(2**20))
                else:
                    _zip.writestr(_name, _data)
    ''')


@case(SA, deserved=0, says=(EXITED,))
def forges_a_shared_list_as_its_cell_record(ctx):
    """A wrong module whose cell leaves an error record whose message is a list nested seven times ten-fold, 10 million leaves from a few KB of pickle (gigabytes once copied apart), beside a 20 MB message, then exits: read with bounds, refused, 0."""
    return WRONG_SA + _forge_then_exit(SA, '''
        import torch
        _shared = ["x" * 100]
        for _ in range(7):  # ten lists of the same list, seven times over: 10 million leaves, a few KB of pickle
            _shared = [_shared] * 10
        torch.save({"type": "x", "message": _shared, "traceback": "y" * 20_000_000}, _path)
    ''')
