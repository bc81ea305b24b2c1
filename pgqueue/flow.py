"""Flow control: what a queue's pause and limits are, as values users build and read.

:class:`Rate` is the value of ``set_queue_limits(..., rate=...)``; :class:`QueueSettings` is what
:func:`pgqueue.queue_settings` reads back. Both live in ``jobs_queues`` (pgqueue_0012), one row per
queue an operator paused or limited; a queue without a row is unpaused and unlimited.

How workers learn of a change: :func:`pgqueue.pause`, :func:`pgqueue.resume` and
:func:`pgqueue.set_queue_limits` send, in the caller's transaction (so on commit, never on
rollback), ``pg_notify(channel, SETTINGS_HINT)`` on the placement's channel
(:func:`pgqueue.channel_for`: ``jobs``, or ``<schema>.jobs``). The payload
:data:`~pgqueue.schema.SETTINGS_HINT` is ``",settings"``: it starts with a comma, which no queue
name holds, so a listener tells it from the insert trigger's queue names and from
:data:`~pgqueue.schema.CANCEL_HINT` (``",cancel"``). It names no queue (a queue name may take the
whole 8,000-byte payload): a worker that hears it re-reads the ``jobs_queues`` rows of the queues
it serves. A worker that does not listen (or missed it while reconnecting) re-reads them on its
fallback poll.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from pgqueue._base.durations import parse_duration
from pgqueue._base.validation import check_duration, check_positive_int, check_queue
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError

# ``10/1s``, ``100/5m``, ``3/250ms``; a bare number after the slash is seconds (``10/2``).
# ASCII digits only, as every number pgqueue reads from text.
_RATE_TEXT = re.compile(r"\s*([0-9]+)\s*/\s*(\S+)\s*")


@dataclass(frozen=True, init=False)
class Rate:
    """At most ``limit`` jobs of a queue start in any one window of ``period``.

    Checked when built, so a bad rate raises before any SQL: ``limit`` is an ``int`` of at least
    1 (a ``bool`` is not one), ``period`` a positive ``timedelta`` or number of
    seconds (kept as a ``timedelta``) of at most :data:`pgqueue.MAX_DURATION`.

    Raises:
        InvalidArgumentTypeError: ``limit`` is not an ``int``, or ``period`` neither a
            ``timedelta`` nor seconds.
        InvalidArgumentError: ``limit`` below 1, or ``period`` zero or negative.

    .. versionadded:: 0.1.0
    """

    limit: int
    period: timedelta

    def __init__(self, limit: int, period: timedelta | float) -> None:
        object.__setattr__(self, "limit", check_positive_int("rate.limit", limit))
        object.__setattr__(self, "period", check_duration("rate.period", period, allow_zero=False))

    @classmethod
    def parse(cls, text: str) -> Rate:
        """``"10/1s"`` (ten per second), ``"100/5m"``, ``"3/250ms"``: what ``pgqueue limit
        --rate`` takes. The period is a duration as the CLI writes them (``s``, ``m``, ``h``,
        ``d``, ``ms``, or plain seconds).

        Raises:
            InvalidArgumentError: the text is not ``LIMIT/PERIOD``, or either part is out of
                range.

        .. versionadded:: 0.1.0
        """
        if not isinstance(text, str):
            raise InvalidArgumentTypeError("rate", "str", text)
        match = _RATE_TEXT.fullmatch(text)
        if match is None:
            raise InvalidArgumentError(
                "rate", f"expected LIMIT/PERIOD such as 10/1s or 100/5m, got {text!r}"
            )
        try:
            period = parse_duration(match.group(2))
        except ValueError as exc:
            raise InvalidArgumentError("rate", str(exc)) from exc
        return cls(int(match.group(1)), period)

    def __str__(self) -> str:
        seconds = self.period.total_seconds()
        for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
            if seconds >= size and seconds % size == 0:
                return f"{self.limit}/{seconds / size:g}{unit}"
        return f"{self.limit}/{seconds * 1000:g}ms"


@dataclass(frozen=True)
class QueueSettings:
    """A queue's pause and limits, as ``jobs_queues`` holds them.

    Attributes:
        queue: The queue's name.
        paused: Workers claim nothing from it (enqueueing still works; running jobs finish).
        concurrency: At most this many of its jobs ``running`` at once, over every worker;
            ``None``: no limit.
        per_key: At most this many of its running jobs share one ``concurrency_key``; jobs
            without a key are not limited by it. ``None``: no limit.
        rate: At most ``rate.limit`` of its jobs start per ``rate.period``; ``None``: no limit.

    .. versionadded:: 0.1.0
    """

    queue: str
    paused: bool = False
    concurrency: int | None = None
    per_key: int | None = None
    rate: Rate | None = None

    @property
    def limited(self) -> bool:
        """Whether any limit is set (a pause is not a limit)."""
        return self.concurrency is not None or self.per_key is not None or self.rate is not None

    @property
    def limits_text(self) -> str:
        """The limits as one line: ``concurrency 4, per_key 2, rate 10/1s``, or ``-``."""
        return describe_limits(self.concurrency, self.per_key, self.rate)


def describe_limits(concurrency: int | None, per_key: int | None, rate: Rate | None) -> str:
    """``concurrency 4, per_key 2, rate 10/1s``, or ``-`` for a queue without limits: how
    ``pgqueue queues`` and the dashboard show them."""
    parts = [
        f"{name} {value}"
        for name, value in (("concurrency", concurrency), ("per_key", per_key), ("rate", rate))
        if value is not None
    ]
    return ", ".join(parts) or "-"


def check_limits(
    queue: object, concurrency: object, per_key: object, rate: object
) -> tuple[str, int | None, int | None, Rate | None]:
    """The arguments of ``set_queue_limits``, checked: a queue name, limits of at least 1 (or
    ``None``), a :class:`Rate` (or ``None``)."""
    name = check_queue(queue)
    checked = [
        None if value is None else check_positive_int(argument, value)
        for argument, value in (("concurrency", concurrency), ("per_key", per_key))
    ]
    if rate is not None and not isinstance(rate, Rate):
        raise InvalidArgumentTypeError("rate", "pgqueue.Rate", rate)
    return name, checked[0], checked[1], rate
