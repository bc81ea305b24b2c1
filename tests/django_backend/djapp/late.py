"""A task module no app's ``tasks`` module imports: the worker imports it when a job names it."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task
def late_add(a: int, b: int) -> int:
    return a + b
