"""``pgqueue_worker`` (pgqueue's worker on the project's tasks), ``pgqueue_migrate`` (pgqueue's
revisions on a database) and ``pgqueue_web`` (the dashboard)."""
