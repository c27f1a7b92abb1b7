"""``mypyc_attr`` for the modules the optional compiled build compiles (see setup.py).

mypyc reads the decorator from the type hints (this name is
``mypy_extensions.mypyc_attr`` to the type checker); at run time, compiled or
not, it is this no-op, so neither build needs ``mypy_extensions`` installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["mypyc_attr"]

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr
else:

    def mypyc_attr(*attrs: Any, **kwattrs: Any) -> Any:
        """Return the class unchanged."""
        return lambda cls: cls
