"""The lab's error: a lab fleet cannot be brought up or down (one line, as every specdec error)."""

from __future__ import annotations

from specdec.errors import SpecdecError

__all__ = ["LabError"]


class LabError(SpecdecError):
    pass
