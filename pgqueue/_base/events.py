"""``JobContext.stopping``: a ``threading.Event`` whose condition is built when first used.

The worker builds one ``JobContext`` per claimed job, and ``threading.Event()`` is the costliest
part of it: its ``Condition(Lock())`` probes the plain lock for three methods it lacks, each probe
a raised and caught ``AttributeError``. Callgrind counted ~21,800 instructions per
``threading.Event()`` (CPython 3.11), about a tenth of everything the worker's process does per
no-op job. Most jobs never touch their event (only a lost lease, a cancel or a shutdown sets it,
and a long handler polls ``is_set()``), so :class:`LazyEvent` builds the condition on first use:
~1,750 instructions per event.

It is a real ``threading.Event`` (a subclass): ``set``, ``clear``, ``wait`` and ``is_set`` are the
standard library's own, running on the same ``Condition(Lock())``, created once under a
module-wide lock so two threads that touch a fresh event together share one condition. It relies
on ``threading.Event`` keeping its state in ``_cond`` and ``_flag`` (so it has since Python 2);
:func:`stopping_event` checks that once at import and hands out plain events otherwise.
"""

from __future__ import annotations

import threading

#: Held only while a fresh event's condition is built (nothing is acquired inside it).
_BUILDING = threading.Lock()


class LazyEvent(threading.Event):
    """A ``threading.Event`` whose ``Condition`` is built by its first set, clear or wait."""

    def __init__(self) -> None:  # not Event.__init__: that builds the condition now
        self._flag = False
        self._lazy_cond: threading.Condition | None = None

    @property
    def _cond(self) -> threading.Condition:  # what Event's own methods use
        cond = self._lazy_cond
        if cond is None:
            with _BUILDING:
                cond = self._lazy_cond
                if cond is None:
                    cond = self._lazy_cond = threading.Condition(threading.Lock())
        return cond


def _stdlib_matches() -> bool:
    """``threading.Event`` keeps its condition in ``_cond`` and its flag in ``_flag``."""
    state = vars(threading.Event())
    return isinstance(state.get("_cond"), threading.Condition) and state.get("_flag") is False


_LAZY = _stdlib_matches()


def stopping_event() -> threading.Event:
    """A fresh, unset event: a :class:`LazyEvent` where the standard library is as expected."""
    return LazyEvent() if _LAZY else threading.Event()
