"""Each database operation written once, as data: its validated parameters, statement and rows.

``calls`` builds a :class:`~pgqueue._sql.calls.Call` for every operation on ``jobs``,
``periodic_calls`` for ``jobs_periodic`` (whose statements live in ``periodic_statements``; those
of ``jobs`` in :mod:`pgqueue._sql.statements`). The thin runners execute them:
:mod:`pgqueue.repository` (sync), :mod:`pgqueue.aio` (``await``) and the worker's claim
replay. No I/O here.
``options`` holds an enqueue's options as one checked value
(:class:`~pgqueue._sql.options.EnqueueOptions`), which the enqueue calls take whole;
``driver_errors`` says what a driver's exception means (retry it, a unique key's conflict, a
missing schema ...), once for the worker, the repository and the command line. ``reads`` holds
the read queries of the operator side (admin, doctor, testing, hence the dashboard), executed
where they are used.

May import: :mod:`pgqueue._sql.statements`, :mod:`pgqueue.models`, :mod:`pgqueue.schema`,
:mod:`pgqueue.results`, :mod:`pgqueue.periodic` (the definition), :mod:`pgqueue.errors` and
:mod:`pgqueue._base`. Never the runners, the worker, the CLI or the dashboard.
"""
