"""Fixtures the `agentcore` runtime tests share (the loopback stand-ins live in acr_stub.py)."""

from __future__ import annotations

import contextlib

import pytest

from acr_stub import AWS_TEST_ENV, aws_environment, serve, serve_data_plane


@pytest.fixture(scope="module")
def aws(request):
    """Fake credentials, and a real S3 endpoint (moto) that the in-process agents also write to,
    with the test module's `BUCKET` created; yields its URL. moto keeps one S3 per process, so
    each module names its own bucket."""
    with aws_environment(request.module.BUCKET) as s3_url:
        yield s3_url


@pytest.fixture
def aws_credentials(monkeypatch):
    """Fake AWS credentials and region for boto3, for this test only."""
    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def acr_plane(aws_credentials):
    """`acr_plane(app, arn)`: serves the agent `app` on loopback behind a `DataPlaneStub` that
    routes `arn` to it, and returns the stub; both stop when the test ends."""
    with contextlib.ExitStack() as stack:
        def start(app, arn: str):
            agent = serve(app)
            stack.callback(agent.stop)
            return stack.enter_context(serve_data_plane({arn: agent.url}))

        yield start
