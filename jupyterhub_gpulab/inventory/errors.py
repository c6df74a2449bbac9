"""Errors raised while building an inventory.

Pure data, no I/O. A bad declared inventory is reported all at once: :class:`InventoryError`
carries every problem found, one line each, so an admin fixes the whole file in one pass.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..units import counted

__all__ = ["InventoryError"]


class InventoryError(ValueError):
    """A declared inventory (``c.GPULab.inventory``) or inventory setting that cannot be used.

    ``errors`` is the list of problems, each a line that names the entry
    (``inventory[2] (GPU-…)``) and says how to fix it; ``str(error)`` is a header followed by
    those lines. Raised at load time, never later.
    """

    def __init__(self, errors: Iterable[str], header: str = "invalid GPU inventory") -> None:
        self.errors: list[str] = list(errors)
        self.header = header
        count = len(self.errors)
        title = f"{header} ({counted(count, 'problem')}):"
        super().__init__("\n".join([title, *(f"  - {e}" for e in self.errors)]))
