"""Reading a JSON request body without letting a client cost a 5xx or a hang.

Checks the content type, the size (before reading it all) and that the
bytes are UTF-8 (cheap next to parsing, and the only way to catch bad bytes
inside the parts of a document a selective parser skips). Nesting too
deep for Python's parser is a RecursionError, which becomes a 400 too;
callers that walk the result catch RecursionError the same way.
"""

from __future__ import annotations

from typing import Any

from gunicorn.http.errors import NoMoreData, ParseException
from werkzeug.exceptions import ClientDisconnected
from werkzeug.wrappers import Request


class BadBody(ValueError):
    """A body that cannot be taken; `status` is the HTTP code to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def read_body(req: Request, *, max_bytes: int) -> bytes:
    """The bytes of a JSON body, once its content type and size are acceptable; raises BadBody otherwise."""
    return read_wsgi_body(req.environ, max_bytes=max_bytes)


def _content_length(environ: dict[str, Any]) -> int | None:
    """The request's Content-Length, or None when it is chunked or has none (as werkzeug reads it)."""
    if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
        return None
    value = environ.get("CONTENT_LENGTH")
    if not value:
        return None
    try:
        length = int(value)
    except ValueError:
        return None
    return length if length >= 0 else None


def read_wsgi_body(environ: dict[str, Any], *, max_bytes: int) -> bytes:
    """`read_body` from the WSGI environ itself, for paths answered without a request object."""
    content_type = environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
    if content_type and content_type != "application/json" and not content_type.endswith("+json"):
        raise BadBody(f"content type {content_type!r} is not application/json", 415)
    content_length = _content_length(environ)
    if content_length is not None and content_length > max_bytes:
        raise BadBody(f"body of {content_length} bytes is over the limit of {max_bytes}", 413)
    try:
        # one read: werkzeug's stream would copy a large body 64 KiB at a time; chunked: no more than one byte
        # past the limit
        raw = environ["wsgi.input"].read(content_length if content_length is not None else max_bytes + 1)
    except (ParseException, NoMoreData) as e:  # gunicorn reads chunked bodies as the application reads them
        raise BadBody(f"body ended early or is not valid chunked encoding: {e}") from None
    except ClientDisconnected:
        raw = b""
        if content_length is None:
            raise BadBody("body ended before it was complete (sent too slowly, or not valid chunked encoding)") from None
    if content_length is not None and len(raw) < content_length:   # the server's read deadline passed
        raise BadBody(f"body not received in time: {len(raw)} of {content_length} bytes", 408)
    if len(raw) > max_bytes:
        raise BadBody(f"body of {len(raw)} bytes is over the limit of {max_bytes}", 413)
    if not raw:
        raise BadBody("empty body; expected JSON")
    if not raw.isascii():              # JSON is UTF-8 (RFC 8259); parsers that skip what they do not need never look
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadBody(f"body is not valid JSON: not UTF-8 at byte {e.start}") from None
    return raw
