"""The check library: public checks for students (here) and hidden checks (``.hidden``)."""

from .compare import CheckFailed
from .public import check, skip_if_unimplemented

__all__ = ["check", "skip_if_unimplemented", "CheckFailed"]
