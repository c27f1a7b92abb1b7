"""What each of the dispatcher's workers handles now: a read-only mapping over their cells.

Each worker owns a one-item cell (a list) and stores the item it handles in
it, and ``None`` when idle: a store into a list per message, where a dict
insert and delete cost some 400 instructions in the compiled build. The leases
read the mapping at each tick (the messages whose lease to extend) and
``stats()`` counts it.

Left out of the compiled build: a compiled class cannot derive from ``Mapping``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

__all__ = ["Running"]

T = TypeVar("T")


class Running(Mapping[Any, T]):
    """Worker greenlet -> the item it handles now, over ``cells`` (worker -> its cell)."""

    __slots__ = ("_cells",)

    def __init__(self, cells: dict[Any, list[T | None]]) -> None:
        self._cells = cells

    def __getitem__(self, worker: Any) -> T:
        item = self._cells[worker][0]
        if item is None:
            raise KeyError(worker)
        return item

    def __iter__(self) -> Iterator[Any]:
        return iter([worker for worker, cell in self._cells.items() if cell[0] is not None])

    def __len__(self) -> int:
        return sum(cell[0] is not None for cell in self._cells.values())
