"""CreateFleet calls: concurrent identical launches batched into one call, throttling retried with backoff,
and a call whose answer was lost (a timeout after EC2 launched) recovered by the tag it put on the instances.

Launches that ask for the same thing (template, overrides, capacity type, tags) within `idle` seconds of each
other, and at most `max_wait` after the first, become one CreateFleet with TotalTargetCapacity = their number,
as Karpenter batches them; each caller gets one of the instances. Every call carries a ClientToken and tags
its instances with it, so a retry never launches twice: before sending again, the instances already tagged
with the token are looked up and used. Every instance of a call also carries one `karpy.dev/batch/<claim>` tag
per claim of the batch, and the claims (sorted) get the instances (sorted by id) in order, so a controller
restarted between CreateFleet and tagging each instance with its claim finds the one meant for it (`assigned`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import random
import threading
import time
from typing import Any, Callable

import botocore.exceptions

from karpy.controller.cloudprovider.aws.errors import explain, is_throttling
from karpy.controller.cloudprovider.types import CloudError

log = logging.getLogger("controller.cloudprovider.aws")
LAUNCH_TOKEN_TAG = "karpy.dev/launch-token"
BATCH_TAG_PREFIX = "karpy.dev/batch/"
MAX_BATCH = 40                            # an instance takes at most 50 tags; one per claim of its batch, and a few more
ATTEMPTS = 5
BACKOFF_SECONDS = 0.2                     # doubled each attempt, with jitter, at most MAX_BACKOFF_SECONDS
MAX_BACKOFF_SECONDS = 5.0
LOST_ANSWER = (botocore.exceptions.ReadTimeoutError, botocore.exceptions.ConnectionClosedError,
               botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError)
Obj = dict[str, Any]


def batch_tag(claim: str) -> str:
    """The tag key that says an instance came from a CreateFleet call made (in part) for NodeClaim `claim`."""
    return BATCH_TAG_PREFIX + claim


def assigned(claim: str, instances: list[Obj]) -> Obj | None:
    """Pure: of the instances whose batch tags name `claim`, the one its batch gave it, or None (EC2 launched
    fewer instances than the batch asked for). A batch is the instances of one launch token."""
    batches: dict[str, list[Obj]] = {}
    for i in instances:
        tags = {t["Key"]: t["Value"] for t in i.get("Tags") or []}
        if batch_tag(claim) in tags:
            batches.setdefault(tags.get(LAUNCH_TOKEN_TAG, ""), []).append(i)
    for members in batches.values():
        claims = sorted(t["Key"].removeprefix(BATCH_TAG_PREFIX) for t in members[0].get("Tags") or []
                        if t["Key"].startswith(BATCH_TAG_PREFIX))
        ordered = sorted(members, key=lambda i: i["InstanceId"])
        slot = claims.index(claim)
        if slot < len(ordered):
            return ordered[slot]
    return None


@dataclasses.dataclass
class Launched:
    """What one caller gets: its instance as DescribeInstances tells it (None when EC2 launched fewer than asked)
    and the fleet's errors."""
    instance: Obj | None
    errors: list[Obj]


@dataclasses.dataclass
class _Batch:
    request: Obj
    claims: list[str] = dataclasses.field(default_factory=list)
    first: float = 0.0
    last: float = 0.0
    closed: bool = False
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    instances: list[Obj] = dataclasses.field(default_factory=list)
    errors: list[Obj] = dataclasses.field(default_factory=list)
    error: Exception | None = None


class FleetLauncher:
    """`fleet` is an EC2 client that does not retry by itself (a blind resend could launch twice). The lookups
    are the provider's: `describe` reads instances by id, `find` the live instances that match EC2 filters."""

    def __init__(self, fleet: Any, *, describe: Callable[[list[str]], list[Obj]], find: Callable[[list[Obj]], list[Obj]],
                 idle: float = 0.035, max_wait: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self.fleet, self.describe, self.find = fleet, describe, find
        self.idle, self.max_wait, self.sleep, self.clock = idle, max_wait, sleep, clock
        self._lock = threading.Lock()
        self._open: dict[str, _Batch] = {}
        self.calls = 0                          # CreateFleet requests sent, retries included

    def launch(self, request: Obj, claim: str) -> Launched:
        """One instance for `claim` (the node name) from a CreateFleet `request` for one instance."""
        if self.idle <= 0:
            alone = _Batch(request, [claim])
            self._send(alone)
            return self._share(alone, claim)
        key = json.dumps(request, sort_keys=True)
        with self._lock:
            batch = self._open.get(key)
            if batch is not None and len(batch.claims) >= MAX_BATCH:
                batch = None                    # full: it goes as it is, this claim starts the next one
            leader = batch is None
            if batch is None:
                batch = self._open[key] = _Batch(request, first=self.clock())
            batch.claims.append(claim)
            batch.last = self.clock()
        if leader:
            self._wait_for_quiet(batch)
            with self._lock:
                if self._open.get(key) is batch:
                    del self._open[key]
            self._send(batch)
        else:
            batch.done.wait()
        return self._share(batch, claim)

    def _wait_for_quiet(self, batch: _Batch) -> None:
        while True:
            with self._lock:
                now = self.clock()
                left = min(batch.last + self.idle, batch.first + self.max_wait) - now
            if left <= 0:
                return
            self.sleep(left)

    def _send(self, batch: _Batch) -> None:
        try:
            response = self._call(batch.request, batch.claims)
            batch.errors = list(response.get("Errors") or [])
            ids = sorted(i for group in response.get("Instances") or [] for i in group.get("InstanceIds") or [])
            if ids:                                 # one DescribeInstances for the batch: the callers need DNS names
                described = {i["InstanceId"]: i for i in self.describe(ids)}
                batch.instances = [described[i] for i in ids if i in described]
        except Exception as e:                      # every caller of the batch learns it
            batch.error = e
        finally:
            batch.done.set()

    @staticmethod
    def _share(batch: _Batch, claim: str) -> Launched:
        """The claims, sorted, get the instances, sorted by id: the order `assigned` finds again after a restart."""
        if batch.error is not None:
            raise batch.error
        slot = sorted(batch.claims).index(claim)
        return Launched(batch.instances[slot] if slot < len(batch.instances) else None, batch.errors)

    def _call(self, request: Obj, claims: list[str]) -> Obj:
        token = hashlib.sha256("\n".join(claims).encode()).hexdigest()[:32]
        body = copy.deepcopy(request)
        body["ClientToken"] = token
        body["TargetCapacitySpecification"]["TotalTargetCapacity"] = len(claims)
        for spec in body.get("TagSpecifications") or []:
            if spec["ResourceType"] == "instance":
                spec["Tags"].append({"Key": LAUNCH_TOKEN_TAG, "Value": token})
                spec["Tags"].extend({"Key": batch_tag(c), "Value": "true"} for c in sorted(claims))
        for attempt in range(ATTEMPTS):
            last = attempt == ATTEMPTS - 1
            if attempt:                             # the answer to an earlier try may have been lost
                found = sorted(i["InstanceId"] for i in self.find([{"Name": f"tag:{LAUNCH_TOKEN_TAG}", "Values": [token]},
                                                                   {"Name": "instance-state-name", "Values": ["pending", "running"]}]))
                if found:
                    log.info("Found %d instance(s) launched by an earlier CreateFleet try (token %s)", len(found), token)
                    return {"Instances": [{"InstanceIds": found}], "Errors": []}
            self.calls += 1
            try:
                return self.fleet.create_fleet(**body)
            except botocore.exceptions.ClientError as e:
                code, message = e.response["Error"].get("Code", ""), e.response["Error"].get("Message", "")
                if not is_throttling(code) or last:
                    raise CloudError(explain(code, message)) from None
                log.warning("%s", explain(code, message))
                self.sleep(min(MAX_BACKOFF_SECONDS, BACKOFF_SECONDS * 2 ** attempt) * random.uniform(0.5, 1.0))
            except LOST_ANSWER as e:
                log.warning("CreateFleet got no answer (%s); looking for its instances before trying again", e)
                if last:
                    raise CloudError(f"EC2 did not answer CreateFleet {ATTEMPTS} times ({e})") from None
        raise AssertionError("unreachable")
