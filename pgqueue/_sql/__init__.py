"""Each database operation written once, as data: its validated parameters, statement and rows.

``calls`` builds a :class:`~pgqueue._sql.calls.Call` for every operation on ``jobs``,
``periodic_calls`` for ``jobs_periodic`` (whose statements live in ``periodic_statements``; those
of ``jobs`` in :mod:`pgqueue.statements`); the enqueue calls take the options whole, as one
checked :class:`pgqueue.EnqueueOptions`. ``runners`` executes them, the only I/O here: ``run`` and
``drive`` on a connection or session, ``arun`` and ``adrive`` awaited, for every door
(:mod:`pgqueue.repository`, :mod:`pgqueue.aio`, tasks, chains and groups); the worker's claim
replay runs its own. ``driver_errors`` says what a driver's exception means (retry it, a
unique key's conflict, a missing schema ...), once for the worker, the repository and the
command line. ``reads`` holds the read queries of the operator side (admin, doctor, testing,
hence the dashboard), executed where they are used.

May import: :mod:`pgqueue.statements`, :mod:`pgqueue.models`, :mod:`pgqueue.schema`,
:mod:`pgqueue.results`, :mod:`pgqueue.periodic` (the definition),
:mod:`pgqueue.enqueue_options`, :mod:`pgqueue.errors` and :mod:`pgqueue._base`. Never the
repository, the worker, the CLI or the dashboard.
"""
