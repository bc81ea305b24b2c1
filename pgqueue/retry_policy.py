"""Retry policy: how long a failed job waits before its next attempt, and which errors are final.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pgqueue._base.storable import storable
from pgqueue._base.tracebacks import MAX_TRACEBACK_LENGTH
from pgqueue._base.validation import check_duration
from pgqueue.errors import InvalidArgumentTypeError

#: The backoff's defaults, also those of :func:`pgqueue.fail` (the repository takes them from here).
DEFAULT_RETRY_BASE = timedelta(seconds=10)
DEFAULT_RETRY_CAP = timedelta(hours=1)

#: ``last_error`` is cut to this many characters: a huge message bloats every row version.
MAX_ERROR_LENGTH = 2000

__all__ = ["MAX_ERROR_LENGTH", "MAX_TRACEBACK_LENGTH", "RetryPolicy", "describe_error"]


@dataclass(frozen=True, init=False)
class RetryPolicy:
    """The backoff of R11 and the exceptions that must not be retried.

    A failed attempt waits ``least(cap, base * 2^attempts)`` before the job is ready again; the
    computation runs in SQL (the same expression as :func:`pgqueue.fail`), so every worker agrees.
    A job fails for good once its ``max_attempts`` are spent, or at once when the handler raised
    one of ``non_retryable`` (a bad payload will not get better by waiting).

    Attributes:
        base: First unit of the backoff, given as a ``timedelta`` or seconds (kept as a
            ``timedelta``). Default 10 seconds (20 s after the first failure, then 40 s, 80 s,
            160 s).
        cap: Longest wait between two attempts (likewise). Default one hour.
        non_retryable: Exception types (and their subclasses) that fail the job at once.
            Default: none.

    .. versionadded:: 0.1.0
    """

    base: timedelta
    cap: timedelta
    non_retryable: tuple[type[BaseException], ...]

    def __init__(
        self,
        base: timedelta | float = DEFAULT_RETRY_BASE,
        cap: timedelta | float = DEFAULT_RETRY_CAP,
        non_retryable: tuple[type[BaseException], ...] = (),
    ) -> None:
        if not isinstance(non_retryable, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in non_retryable
        ):
            raise InvalidArgumentTypeError(
                "non_retryable", "a tuple of exception types", non_retryable
            )
        object.__setattr__(self, "base", check_duration("base", base, allow_zero=True))
        object.__setattr__(self, "cap", check_duration("cap", cap, allow_zero=True))
        object.__setattr__(self, "non_retryable", non_retryable)

    def should_retry(self, exc: BaseException) -> bool:
        """False when ``exc`` is one of the non-retryable types."""
        return not isinstance(exc, self.non_retryable)


def describe_error(exc: BaseException) -> str:
    """``"TypeName: message"`` cut to :data:`MAX_ERROR_LENGTH` characters, for ``last_error``.

    What PostgreSQL cannot store (U+0000, a surrogate) is written as its escape
    (:func:`~pgqueue._base.validation.storable`): the text is stored, logged and told to hooks
    whole. A message that cannot be made (``__str__`` raised) is said to be missing, as
    ``traceback`` says it.
    """
    try:
        message = str(exc)
    except Exception:
        message = "<exception str() failed>"
    text = storable(f"{type(exc).__name__}: {message}")
    if len(text) > MAX_ERROR_LENGTH:
        text = text[: MAX_ERROR_LENGTH - 3] + "..."
    return text
