"""The core imports and runs without the optional extras; the integrations say what is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Block the optional packages the way an environment without them would fail to import them.
_BLOCK = (
    "import sys\n"
    "for name in ('prometheus_client', 'opentelemetry', 'opentelemetry.trace',"
    " 'opentelemetry.propagate', 'opentelemetry.context', 'starlette', 'jinja2', 'uvicorn',"
    " 'django', 'django_tasks'):\n"
    "    sys.modules[name] = None\n"
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK + code], capture_output=True, text=True, timeout=60
    )


def test_core_imports_without_prometheus_opentelemetry_and_the_web_packages() -> None:
    result = _run(
        "import pgqueue, pgqueue.worker, pgqueue.hooks, pgqueue.aio, pgqueue.cli, pgqueue.contrib\n"
        "import pgqueue.admin, pgqueue.doctor\n"
        "loaded = [m for m, v in sys.modules.items() if v is not None]\n"
        "assert 'prometheus_client' not in loaded\n"
        "assert not [m for m in loaded if m.startswith(('starlette', 'jinja2', 'uvicorn'))]\n"
        "assert 'pgqueue.web' not in loaded\n"
        "assert not [m for m in loaded if m.startswith(('django', 'pgqueue.contrib.django'))]\n"
        "print(pgqueue.WorkerHooks.__name__)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "WorkerHooks"


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("pgqueue.contrib.prometheus", "prometheus"),
        ("pgqueue.contrib.otel", "otel"),
        ("pgqueue.web", "web"),
        ("pgqueue.contrib.django._compat", "django"),
    ],
)
def test_integrations_name_their_extra(module: str, extra: str) -> None:
    result = _run(f"import {module}\n")
    assert result.returncode != 0
    assert f'pip install "pgqueue-sa[{extra}]"' in result.stderr


def test_the_django_backend_names_its_extra_and_the_package_imports_alone() -> None:
    result = _run(
        "import pgqueue.contrib.django\nfrom pgqueue.contrib.django import PgQueueBackend\n"
    )
    assert result.returncode != 0
    assert 'pip install "pgqueue-sa[django]"' in result.stderr


def test_pgqueue_web_without_the_extra_is_one_line_exit_2() -> None:
    result = _run(
        "from pgqueue.cli import main\n"
        "sys.exit(main(['web', '--url', 'postgresql://u:secret@127.0.0.1:1/db']))\n"
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == (
        'pgqueue: error: pgqueue web needs the web extra: pip install "pgqueue-sa[web]"'
    )
