"""The ground floor: small helpers that know nothing of jobs, SQL or the worker.

``validation`` checks input before any SQL (so bad input writes nothing), ``storable`` says
which strings PostgreSQL cannot store (the rule ``validation`` refuses and error texts are escaped
by), ``readable`` shows a stored value no Python client can load instead of failing on it;
``schedule`` computes the ticks of cron and interval schedules; ``urls`` reads database URLs in
the forms users paste and masks their passwords in every message; ``connections`` names
pgqueue's connections in ``pg_stat_activity``; ``durations`` reads and prints ``7d``, ``5m``,
``250ms``; ``text`` draws tables like ``psql``; ``tracebacks`` trims a failed attempt's traceback
as ``jobs.errors`` stores it; ``embedded`` starts a throwaway PostgreSQL for ``pgqueue demo``;
``events`` builds the per-job ``stopping`` event cheaply; ``joblog`` buffers one attempt's log
lines, encoded and bounded, until a write the worker makes anyway carries them;
``distribution`` is the name pgqueue is published under, for the install lines messages print.

May import: :mod:`pgqueue.errors` and each other, nothing else of pgqueue. Anything may import
them.
"""
