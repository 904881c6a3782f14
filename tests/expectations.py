"""Expectations that read as the test's sentence."""

from __future__ import annotations

import base64
import json
from typing import Any

import requests


def expect_admitted(response: requests.Response, uid: str | None = None) -> dict[str, Any]:
    """The AdmissionReview response allowed the object; returns the response part."""
    __tracebackhide__ = True
    assert response.status_code == 200, response.text
    review = response.json()
    assert review["kind"] == "AdmissionReview"
    answer = review["response"]
    if uid is not None:
        assert answer["uid"] == uid
    assert answer["allowed"] is True, answer.get("status")
    return answer


def expect_denied(response: requests.Response, *paths: str) -> str:
    """The object was denied with status 400 naming every path in `paths`; returns the message."""
    __tracebackhide__ = True
    assert response.status_code == 200, response.text
    answer = response.json()["response"]
    assert answer["allowed"] is False, f"expected a denial naming {paths}"
    assert answer["status"]["code"] == 400
    message = answer["status"]["message"]
    for path in paths:
        assert any(line.startswith(path + ": ") for line in message.splitlines()), (
            f"{path!r} not named in:\n{message}"
        )
    return message


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The decoded JSONPatch of an admission response (empty when there is none)."""
    __tracebackhide__ = True
    if "patch" not in answer:
        return []
    assert answer["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(answer["patch"]))


def expect_json_error(response: requests.Response, status: int = 400) -> str:
    """A JSON error body with the given status; returns its message."""
    __tracebackhide__ = True
    assert response.status_code == status, (response.status_code, response.text[:300])
    body = response.json()
    assert body["message"]
    return str(body["message"])


def eventually(check: Any, *, timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Call `check` until it returns a truthy value (returned) or raises no AssertionError; else fail."""
    __tracebackhide__ = True
    import time

    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
            last = None
        except AssertionError as e:
            last = e
        time.sleep(interval)
    raise AssertionError(f"not within {timeout}s: {last or 'condition stayed false'}")
