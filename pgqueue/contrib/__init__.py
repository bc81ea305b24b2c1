"""Integrations built on :mod:`pgqueue.hooks`, each behind an optional extra.

- :mod:`pgqueue.contrib.prometheus` (``pip install "pgqueue[prometheus]"``): counters, histograms
  and queue-depth gauges.
- :mod:`pgqueue.contrib.otel` (``pip install "pgqueue[otel]"``): a span per job, and trace context
  carried from the producer to the handler in the job's headers.

Importing :mod:`pgqueue` never imports them: the core runs without either package.

.. versionadded:: 0.3.0
"""
