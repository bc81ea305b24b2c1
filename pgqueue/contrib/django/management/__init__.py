"""Django's management commands of the app (``commands``): ``pgqueue_worker``,
``pgqueue_migrate`` and ``pgqueue_web``, each a face of pgqueue's own command line."""
