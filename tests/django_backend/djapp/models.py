"""The test project's one model: the business write a task is enqueued with."""

from __future__ import annotations

from django.db import models


class Note(models.Model):
    text = models.TextField()

    class Meta:
        app_label = "djapp"
