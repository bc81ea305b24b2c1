"""Settings of the test project's subprocesses: the database from ``DJANGO_TEST_DB_*``."""

from __future__ import annotations

import os

import django

SECRET_KEY = "test"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "pgqueue.contrib.django",
    "djapp",
]
LOGIN_URL = "/accounts/login/"
ROOT_URLCONF = "djproject.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["DJANGO_TEST_DB_NAME"],
        "USER": os.environ.get("DJANGO_TEST_DB_USER", ""),
        "PASSWORD": os.environ.get("DJANGO_TEST_DB_PASSWORD", ""),
        "HOST": os.environ.get("DJANGO_TEST_DB_HOST", ""),
        "PORT": os.environ.get("DJANGO_TEST_DB_PORT", ""),
    }
}
TASKS = {
    "default": {
        "BACKEND": "pgqueue.contrib.django.PgQueueBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"database": "default"},
    }
}
if django.VERSION >= (6, 1):  # MAILERS replaces EMAIL_BACKEND (deprecated in 6.1)
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
else:
    EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
