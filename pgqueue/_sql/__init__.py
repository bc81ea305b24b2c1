"""Each database operation written once, as data: its validated parameters, statement and rows.

One shape for every table: ``<table>_statements`` holds the pure Core builders of the table, and
``<table>_calls`` turns them into :class:`~pgqueue._sql.calls.Call` values (parameters checked,
statement, row mapping) that a runner executes. ``jobs``: ``statements`` and ``calls`` (the
names without a prefix, the queue's own table), with ``workflow_statements`` for the
dependencies of ``jobs_dependencies``, ``limited_claim`` for the claim of a queue with limits,
and ``durable_statements`` and ``durable_calls`` for durable jobs' steps, sleeps and signals;
``jobs_periodic``: ``periodic_statements`` and ``periodic_calls``; ``jobs_queues``:
``flow_statements`` and ``flow_calls``; ``jobs_workers`` (a worker's row):
``worker_statements`` and ``worker_calls``; ``jobs_retention`` (how long finished jobs are kept,
and the prune that deletes them): ``retention_statements`` and ``retention_calls``; ``jobs_logs``
(the lines each attempt of a job recorded, written inside the worker's batched statements):
``log_statements`` and ``log_calls``. The enqueue
calls take the options whole, as one checked :class:`pgqueue.EnqueueOptions`.

``runners`` executes them, the only I/O here: ``run`` and ``drive`` on a connection or session,
``arun`` and ``adrive`` awaited, for every door: :mod:`pgqueue.repository` and
:mod:`pgqueue.aio` (the users'), tasks, chains and groups, and :mod:`pgqueue._worker.store` (the
worker's); the worker's claim replay runs the same calls on the driver. ``driver_errors`` says
what a driver's exception means (retry it, a unique key's conflict, a missing schema ...), once
for the worker, the repository and the command line.
``deferred_json`` makes the worker's claim cursors return ``jsonb`` as text (a payload is
decoded when a handler reads it). ``reads`` holds the read queries of the
operator side (admin, doctor, testing, hence the dashboard), executed where they are used. Rules
the database enforces are written once: what "live" means is
:data:`pgqueue.models.LIVE_STATUSES`; the text a failed dependency leaves its dependents is the
SQL function ``jobs_dependency_error`` (pgqueue_0014).

May import: :mod:`pgqueue.models`, :mod:`pgqueue.schema`, :mod:`pgqueue.results`,
:mod:`pgqueue.flow` and :mod:`pgqueue.periodic` (the definitions),
:mod:`pgqueue.enqueue_options`, :mod:`pgqueue.errors` and :mod:`pgqueue._base`; no I/O except
in ``runners``. Never the repository, the worker, the CLI or the dashboard.
"""
