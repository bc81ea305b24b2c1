"""The dashboard masks what the command line masks, with the same function: passwords in
payloads, results, progress, headers, errors, tracebacks and names, in the job page and the
lists; a value cut to fit is masked first. ``create_app(show_raw_values=True)`` (``pgqueue web
--show-raw-values``) shows them as stored."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, text

import pgqueue
from pgqueue.cli import build_parser
from pgqueue.errors import InvalidArgumentTypeError
from pgqueue.web import create_app
from tests.web.conftest import MakeClient

SECRETS = ("S3CR-payload", "S3CR-url", "S3CR two words", "S3CR-error", "S3CR-" + "x" * 60)


def _job(engine: Engine) -> int:
    payload = {
        "dsn": f"host=db password={SECRETS[0]} user=app",
        "broker": f"redis://u:{SECRETS[1]}@cache:6379/0",
        "quoted": f'password="{SECRETS[2]}"',
    }
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(
            conn, payload, queue="mail", headers={"dsn": f"password={SECRETS[0]}"}
        )
        conn.execute(
            text(
                "UPDATE jobs SET last_error = :error, result = CAST(:result AS jsonb), "
                "progress = CAST(:result AS jsonb), errors = CAST(:errors AS jsonb) "
                "WHERE id = :id"
            ),
            {
                "id": job_id,
                # Longer than the list's cell: cut there before its '@', it showed its password.
                "error": f"could not connect to postgresql://app:{SECRETS[4]}@db/app",
                "result": json.dumps({"url": f"postgresql://app:{SECRETS[1]}@db/app"}),
                "errors": json.dumps(
                    [
                        {
                            "attempt": 1,
                            "error": f"password={SECRETS[3]}",
                            "traceback": f'Traceback: password="{SECRETS[2]}"',
                        }
                    ]
                ),
            },
        )
    return job_id


def test_every_page_masks_the_passwords_a_job_holds(
    engine: Engine, make_client: MakeClient
) -> None:
    job_id = _job(engine)
    client = make_client()
    pages = {path: client.get(path).text for path in (f"/jobs/{job_id}", "/jobs", "/", "/live")}
    for path, html in pages.items():
        for secret in SECRETS:
            assert secret not in html, (path, secret)
        assert "x" * 8 not in html, path
    job_page = pages[f"/jobs/{job_id}"]
    assert "password=***" in job_page
    assert "redis://u:***@cache:6379/0" in job_page
    assert "postgresql://app:***@db/app" in pages["/jobs"]  # masked, then cut to the cell


def test_show_raw_values_shows_them_as_stored(engine: Engine, make_client: MakeClient) -> None:
    job_id = _job(engine)
    client = make_client(show_raw_values=True)
    html = client.get(f"/jobs/{job_id}").text
    for secret in SECRETS[:4]:
        assert secret in html, secret
    assert "x" * 60 in html
    assert "S3CR-xxxxx" in client.get("/jobs").text  # the list's cut, unmasked


def test_show_raw_values_is_a_bool_and_the_command_line_has_it(engine: Engine) -> None:
    with pytest.raises(InvalidArgumentTypeError, match="show_raw_values"):
        create_app(engine, show_raw_values="yes")  # type: ignore[arg-type]
    assert build_parser().parse_args(["web", "--show-raw-values"]).show_raw_values is True
    assert build_parser().parse_args(["web"]).show_raw_values is False
