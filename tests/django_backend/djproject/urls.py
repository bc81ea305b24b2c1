"""The test project's one URL: a page Django serves beside the mounted dashboard."""

from __future__ import annotations

from django.http import HttpResponse
from django.urls import path

urlpatterns = [path("hello/", lambda request: HttpResponse("hello from django"))]
