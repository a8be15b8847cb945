"""Trusted grading: student code runs in a sandboxed child; the verdict is made here, in the parent."""
