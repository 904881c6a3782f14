"""RFC 3339 times as the API server writes them: metav1.Time (seconds) and metav1.MicroTime (leases). Pure."""

from __future__ import annotations

import datetime as dt


def parse_time(text: str | None) -> dt.datetime | None:
    """An RFC 3339 timestamp as the API server writes it, or None (absent or not a time)."""
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def rfc3339(moment: dt.datetime) -> str:
    """metav1.Time: UTC, to the second."""
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(moment: dt.datetime) -> str:
    """metav1.MicroTime (a Lease's acquireTime and renewTime): UTC, to the microsecond."""
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
