"""perdure.secrecy: the one rule for what a secret is, and credentials taken out of text."""

from __future__ import annotations

import pytest

from perdure.secrecy import is_secret, redact

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCY"


@pytest.mark.parametrize(("text", "shown"), [
    (f"s3://AKIA:{SECRET}@bucket/run failed", "s3://***@bucket/run failed"),
    (f"'https://tok{SECRET[:8]}@github.com/x'", "'https://***@github.com/x'"),
    (f"see http://u:p@ss{SECRET}@host:9000/b and s3://bucket/k@v2",
     "see http://***@host:9000/b and s3://bucket/k@v2"),
    (f'{{"url": "postgres://app:{SECRET}@db/x"}}', '{"url": "postgres://***@db/x"}'),
    ("s3://bucket/user@example.com/run", "s3://bucket/user@example.com/run"),
    ("mail me at a@b.c, or see https://host/x", "mail me at a@b.c, or see https://host/x"),
])
def test_credentials_in_urls_are_hidden_and_nothing_else(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_the_values_of_secret_variables_are_blanked() -> None:
    env = {"WANDB_API_KEY": SECRET, "HOME": "/home/someone-long", "SHORT_TOKEN": "abc"}
    assert redact(f"key {SECRET} home /home/someone-long abc", env) == \
        "key <WANDB_API_KEY> home /home/someone-long abc"


@pytest.mark.parametrize(("name", "value", "secret"), [
    ("WANDB_API_KEY", "x", True), ("OPENAI_API_KEY", "x", True), ("AZURE_STORAGE_KEY", "x", True),
    ("AZURE_STORAGE_CONNECTION_STRING", "x", True), ("HF_TOKEN", "x", True),
    ("DB_PASSWORD", "x", True), ("MY_SECRET_THING", "x", True), ("AWS_ACCESS_KEY_ID", "x", True),
    ("AWS_ENDPOINT_URL", "https://u:p@minio:9000", True), ("WANDB_PROJECT", "p", False),
    ("AWS_ENDPOINT_URL", "https://minio:9000", False), ("KEYBOARD", "us", False),
])
def test_one_rule_decides_what_is_a_secret(name: str, value: str, secret: bool) -> None:
    assert is_secret(name, value) is secret
