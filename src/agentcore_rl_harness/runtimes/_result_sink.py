"""The local runtime's stand-in for the S3 results bucket (`runtime.result_mode=s3`, no AWS).

agentcore-rl-toolkit's `AgentCoreRLApp` writes its result with `boto3.client("s3").put_object`
only. On the local runtime its session process gets `AWS_ENDPOINT_URL_S3` pointing here (and
placeholder credentials), so the unchanged agent's PutObject lands in this loopback endpoint,
where the runtime picks it up by key. Only PutObject is served (path-style, as botocore sends it
to an IP endpoint); objects are kept until taken, and each is bounded in size.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from ..serving import ThreadedServer, bind_socket

MAX_OBJECT_BYTES = 64 * 1024 * 1024
_TAKE_POLL_S = 0.05


class ResultSink:
    """PutObject on 127.0.0.1; `await take(bucket, key)` returns the written JSON document."""

    def __init__(self) -> None:
        from starlette.applications import Starlette
        from starlette.routing import Route

        self._objects: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()
        app = Starlette(routes=[Route("/{bucket}/{key:path}", self._put, methods=["PUT"])])
        self._server = ThreadedServer(
            app, bind_socket("127.0.0.1", 0, what="the local S3 result sink"),
            what="the local S3 result sink", thread_name="arl-result-sink",
        )
        self._server.start()
        self.url = f"http://127.0.0.1:{self._server.port}"

    def environment(self) -> dict[str, str]:
        """What an agent process needs for its boto3 S3 client to write here."""
        return {
            "AWS_ENDPOINT_URL_S3": self.url,
            "AWS_ACCESS_KEY_ID": "local-result-sink",
            "AWS_SECRET_ACCESS_KEY": "local-result-sink",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    async def _put(self, request: Any) -> Any:
        from starlette.responses import Response

        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_OBJECT_BYTES:
                return Response(status_code=413)
        if request.headers.get("content-encoding", "").startswith("aws-chunked"):
            body = bytearray(_decode_aws_chunked(bytes(body)))
        with self._lock:
            self._objects[(request.path_params["bucket"], request.path_params["key"])] = bytes(body)
        return Response(status_code=200, headers={"ETag": '"0"'})

    async def take(self, bucket: str, key: str) -> Any:
        """Wait (under the caller's deadline) until the object is written; remove and parse it."""
        while True:
            with self._lock:
                data = self._objects.pop((bucket, key), None)
            if data is not None:
                return json.loads(data)
            await asyncio.sleep(_TAKE_POLL_S)

    async def result(self, bucket: str, key: str) -> dict[str, Any]:
        """The agent's result from its result object (ART's envelope: `status_code` != 200 is
        the agent's failure, raised as `SessionFailed`); the object is dropped either way."""
        from ._s3_results import unwrap

        try:
            document = await self.take(bucket, key)
        finally:
            with self._lock:
                self._objects.pop((bucket, key), None)
        return unwrap(document, f"s3://{bucket}/{key} (the local runtime's S3 stand-in)")

    def close(self) -> None:
        self._server.stop()


def _decode_aws_chunked(body: bytes) -> bytes:
    """The payload of an `aws-chunked` body (`<hex size>[;ext]\\r\\n<data>\\r\\n`..., trailers)."""
    out, position = bytearray(), 0
    while position < len(body):
        end = body.index(b"\r\n", position)
        size = int(body[position:end].split(b";")[0], 16)
        if size == 0:
            break
        out += body[end + 2:end + 2 + size]
        position = end + 2 + size + 2
    return bytes(out)
