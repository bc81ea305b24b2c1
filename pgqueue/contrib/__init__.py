"""Integrations built on :mod:`pgqueue.hooks`, each behind an optional extra.

- :mod:`pgqueue.contrib.prometheus` (``pip install "pgqueue-sa[prometheus]"``): counters,
  histograms and queue-depth gauges.
- :mod:`pgqueue.contrib.otel` (``pip install "pgqueue-sa[otel]"``): a span per job, and trace
  context carried from the producer to the handler in the job's headers.
- :mod:`pgqueue.contrib.django` (``pip install "pgqueue-sa[django]"``): a ``django.tasks``
  backend, the Django app of ``manage.py pgqueue_worker`` / ``pgqueue_migrate`` /
  ``pgqueue_web`` and a system check (docs/django.md).

Importing :mod:`pgqueue` never imports them: the core runs without any of those packages.

.. versionadded:: 0.1.0
"""

from pgqueue._base.distribution import pip_install


def missing_extra(module: str, extra: str) -> ImportError:
    """The error an integration raises when its optional package is not installed."""
    return ImportError(f"{module} needs the {extra} extra: {pip_install(extra)}")
