"""What every benchmark prints: a row per figure, a plain-text table, the machine and its load."""

import os
import platform
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Row:
    """One figure of the summary: which section, what was measured, the figure, how to read it."""

    section: str
    item: str
    figure: str
    note: str = ""


def load():
    """The 1-minute load average, or None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def load_text():
    """'load 1.23, 0.98, 0.75 on 2 CPUs' (1, 5 and 15 minutes), or '' where the OS has no load average."""
    try:
        one, five, fifteen = os.getloadavg()
    except (AttributeError, OSError):
        return ""
    return f"load {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def machine():
    """The processor, the CPUs, torch and its build, and the GPU if there is one."""
    gpu = f", GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ", no GPU"
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"torch {torch.__version__}{gpu}")


def table(header, lines, align=None):
    """A plain-text table: columns as wide as their widest cell; ``align`` is '<' or '>' per column."""
    align = align or ["<"] * len(header)
    cells = [[str(c) for c in header]] + [[str(c) for c in line] for line in lines]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def render(row):
        return " | ".join(f"{c:{a}{w}}" for c, a, w in zip(row, align, widths)).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([render(cells[0]), rule, *(render(row) for row in cells[1:])])


def summary(rows):
    """The one table of every figure, sections as rows."""
    return table(["section", "measured", "figure", "note"], [(r.section, r.item, r.figure, r.note) for r in rows],
                 align=["<", "<", ">", "<"])


def quicken_defaults(args, defaults):
    """--quick: every option still at its default takes its quick value ({name: (default, quick)})."""
    if getattr(args, "quick", False):
        for name, (default, quick) in defaults.items():
            if getattr(args, name) == default:
                setattr(args, name, quick)
