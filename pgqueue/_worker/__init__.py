"""The worker's machinery: the components one :class:`pgqueue.Worker` runs, one module each.

:mod:`pgqueue.worker` builds them for each ``run()`` and wires them together; nothing here is
public. ``window`` is the claim window (pure bookkeeping); ``runtime`` is what the running
components share (one lock, the window, how a job ends); ``claimer`` is the main loop (its claim
replayed on the driver by ``replay``, its queues' pauses and limits followed by ``flow``, where
each queue's claim starts kept by ``low_water``);
``threads`` (one lane per mode: lease, and transaction with its tickets, whose handler stuck
past timeout + grace has its session ended by ``abandon``) and ``event_loop`` are the handler
lanes, running handlers through ``executors``, which ``dispatch`` tells which code
runs a job; ``completer`` batches outcomes (a batch one row breaks is split by ``culprits``);
``heartbeat`` keeps the leases; ``reaper`` requeues expired jobs; ``scheduler`` fires periodic
ticks; ``pruner`` deletes finished jobs past their retention; ``deadlines`` is the bookkeeping of
handler timeouts (pure, like the window) and ``watchdog`` the loop that enforces them and stops a
worker whose every thread is stuck; ``transient`` retries short
transactions; ``faults`` decides what a loop does with an error it did not expect; ``pulse`` tells
``/livez`` each loop's liveness; ``signals`` installs the stop handlers; ``outcomes`` is the table
that counts, logs and names the hook of each outcome; ``registration`` writes the worker's row in
``jobs_workers``; ``capture`` records jobs' ``logging`` records as their log lines and says
which lines a batch carries. ``store`` is the worker's
door to the database: its batched statements and its row, run on the repository's runner.

May import: the concept modules below the worker (:mod:`pgqueue.jobs`, :mod:`pgqueue.hooks`,
:mod:`pgqueue.repository`, :mod:`pgqueue.retry_policy`, :mod:`pgqueue.results`,
:mod:`pgqueue.periodic`, :mod:`pgqueue.flow`, :mod:`pgqueue.errors`), :mod:`pgqueue._sql` and
:mod:`pgqueue._base`. Never :mod:`pgqueue.worker`, the package's ``__init__``, the CLI or the
dashboard. Imported by :mod:`pgqueue.worker`, :mod:`pgqueue.testing` (``drain`` runs handlers
through ``executors``) and the process supervisor (``signals``).
"""
