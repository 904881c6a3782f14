"""A Hold: what keeps a node from being disrupted now, in words, and when it lets go. Pure."""

from __future__ import annotations

import dataclasses
import datetime as dt

from karpy.apis.timestamps import rfc3339


@dataclasses.dataclass(frozen=True)
class Hold:
    """Something that keeps a node from being disrupted: `why` in words, `until` when it lets go (None: while it stays)."""

    why: str
    until: dt.datetime | None = None

    def describe(self) -> str:
        """The sentence `karpy explain node` prints."""
        return self.why if self.until is None else f"{self.why} until {rfc3339(self.until)}"
