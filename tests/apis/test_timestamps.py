"""RFC 3339 as the API server writes it: seconds for metav1.Time, microseconds for a Lease's MicroTime."""

from __future__ import annotations

import datetime as dt

from karpy.apis.timestamps import parse_time, rfc3339, rfc3339_micro

MOMENT = dt.datetime(2026, 11, 24, 13, 50, 27, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))


def test_times_are_written_in_utc_to_the_second_or_the_microsecond() -> None:
    assert rfc3339(MOMENT) == "2026-11-24T11:50:27Z"
    assert rfc3339_micro(MOMENT) == "2026-11-24T11:50:27.123456Z"


def test_what_is_written_reads_back() -> None:
    assert parse_time(rfc3339_micro(MOMENT)) == MOMENT
    assert parse_time(rfc3339(MOMENT)) == MOMENT.replace(microsecond=0)


def test_an_absent_or_malformed_time_reads_as_none() -> None:
    assert [parse_time(t) for t in (None, "", "yesterday", "2026-13-01T00:00:00Z")] == [None] * 4
