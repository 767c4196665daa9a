"""Reading a request's body with a bound (the HTTP API's JSON and the web app's forms)."""

from __future__ import annotations

from starlette.requests import Request

from palaced.wire import errors as E
from palaced.wire.protocol import DEFAULT_MAX_FRAME

MAX_BODY = DEFAULT_MAX_FRAME  # the daemon's largest request frame: a larger body cannot pass


async def read_body(request: Request, media_type: str, limit: int = MAX_BODY) -> bytes:
    """The request's body of type ``media_type``, at most ``limit`` bytes.

    Raises:
        FrameTooLarge: the body is larger (said by Content-Length or found reading it).
        InvalidArgs: the Content-Type is another.
    """
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != media_type:
        raise E.InvalidArgs(f"send a body with Content-Type: {media_type}",
                            details={"content_type": ctype[:100]})
    too_large = E.FrameTooLarge(f"the request body exceeds {limit} bytes",
                                details={"max_bytes": limit})
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)
