"""Admission decisions: an AdmissionReview request in, an AdmissionReview response out.

Pure: no Flask, no I/O. The routes in `webhook/app.py` parse the body and
call `review()` with the handler for their path; each handler decodes the
object with the `apis` models, validates or defaults it, and says what to
answer. A denial carries `status.code` 400 and names every offending field.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any, Callable, Mapping

import msgspec
import pydantic
from pydantic import ConfigDict

from karpy.apis.awsnodetemplate_validation import decode_awsnodetemplate, read_awsnodetemplate
from karpy.apis.errors import FieldError, from_validation_error, render
from karpy.apis.provisioner_defaults import provisioner_default_patch
from karpy.apis.provisioner_validation import decode_provisioner, read_provisioner


class AdmissionRequest(pydantic.BaseModel):
    model_config = ConfigDict(extra="allow")
    uid: str
    operation: str = "CREATE"
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = pydantic.Field(default=None, alias="oldObject")


class AdmissionReview(pydantic.BaseModel):
    model_config = ConfigDict(extra="allow")
    api_version: str = pydantic.Field(alias="apiVersion")
    kind: str
    request: AdmissionRequest


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What to answer: allowed or not, with the errors and an optional JSONPatch."""

    errors: tuple[FieldError, ...] = ()
    patch: tuple[dict[str, Any], ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.errors


class _FastRequest(msgspec.Struct):
    uid: str
    operation: str = "CREATE"
    object: dict[str, Any] | None = None


class _FastReview(msgspec.Struct):
    apiVersion: str
    kind: str
    request: _FastRequest


_FAST_REVIEW = msgspec.json.Decoder(_FastReview)
_ENCODER = msgspec.json.Encoder()

Handler = Callable[[dict[str, Any]], Verdict]      # the request's object -> what to answer
_MISSING_OBJECT = Verdict(errors=(FieldError("request.object", "missing required field"),))


# The versions the API server may send (admissionReviewVersions); others are refused, not guessed at.
ADMISSION_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class BadReview(ValueError):
    """A body that is not an AdmissionReview (answered with HTTP 400)."""


def parse_review(body: Mapping[str, Any]) -> AdmissionReview:
    """The AdmissionReview in `body`; raises BadReview naming what is wrong."""
    if not isinstance(body, Mapping):
        raise BadReview("body is not a JSON object")
    try:
        review = AdmissionReview.model_validate(body)
    except pydantic.ValidationError as e:
        raise BadReview("not an AdmissionReview: " + "; ".join(str(f) for f in from_validation_error(e))) from None
    if review.kind != "AdmissionReview":
        raise BadReview(f"not an AdmissionReview: got {review.api_version} {review.kind}")
    if review.api_version not in ADMISSION_VERSIONS:
        raise BadReview(
            f"unsupported AdmissionReview apiVersion {review.api_version!r}: expected one of {', '.join(ADMISSION_VERSIONS)}"
        )
    return review


def review_bytes(raw: bytes, handler: Handler) -> tuple[bytes, Verdict]:
    """The JSON AdmissionReview to answer the JSON `raw` with, and the verdict behind it.

    The body is decoded and its envelope checked in one pass; a body that pass refuses is read again the slow
    way, only to say exactly what is wrong with it. Raises BadReview when it is not an AdmissionReview, and
    ValueError (or RecursionError) when it is not JSON."""
    try:
        fast = _FAST_REVIEW.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        fast = None
    if fast is not None and fast.kind == "AdmissionReview" and fast.apiVersion in ADMISSION_VERSIONS:
        answer, verdict = _answer(fast.apiVersion, fast.request.uid, fast.request.operation, fast.request.object, handler)
    else:
        answer, verdict = review(json.loads(raw), handler)
    return _ENCODER.encode(answer), verdict


def review(body: Mapping[str, Any], handler: Handler) -> tuple[dict[str, Any], Verdict]:
    """The AdmissionReview to answer `body` with, and the verdict behind it.

    Raises BadReview when `body` is not an AdmissionReview."""
    parsed = parse_review(body)
    request = parsed.request
    return _answer(parsed.api_version, request.uid, request.operation, request.object, handler)


def _answer(api_version: str, uid: str, operation: str, obj: dict[str, Any] | None,
            handler: Handler) -> tuple[dict[str, Any], Verdict]:
    if operation == "DELETE":
        verdict = Verdict()
    elif obj is None:
        verdict = _MISSING_OBJECT
    else:
        verdict = handler(obj)
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {"code": 400, "message": render(verdict.errors), "reason": "BadRequest"}
    elif verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(verdict.patch)).encode()).decode()
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}, verdict


def validate_provisioner_request(raw: dict[str, Any], *, aws: bool = True) -> Verdict:
    _, errors = read_provisioner(raw, aws=aws)
    return Verdict(errors=tuple(errors))


def mutate_provisioner_request(raw: dict[str, Any], *, aws: bool = True) -> Verdict:
    provisioner, errors = decode_provisioner(raw)
    if provisioner is None:
        return Verdict(errors=tuple(errors))
    return Verdict(patch=tuple(provisioner_default_patch(raw, aws=aws)))


def validate_awsnodetemplate_request(raw: dict[str, Any]) -> Verdict:
    _, errors = read_awsnodetemplate(raw)
    return Verdict(errors=tuple(errors))


def mutate_awsnodetemplate_request(raw: dict[str, Any]) -> Verdict:
    """AWSNodeTemplates have no defaults in v0.16; an object that does not decode is denied."""
    _, errors = decode_awsnodetemplate(raw)
    return Verdict(errors=tuple(errors))
