"""The demo's picture: the moments it marks, read from its samples, and the PNG it draws."""

from __future__ import annotations

from pathlib import Path

from karpy.demo import Sample, markers, plot


def story() -> list[Sample]:
    """Scale to 10, a node launches, pods bind and run, the deployment goes, the TTL runs, the node goes."""
    rows = [(0, 0, 0, 0, 0, 0), (1, 0, 10, 0, 10, 0), (2, 1, 0, 2, 10, 0), (3, 1, 0, 10, 10, 0),
            (4, 1, 0, 0, 0, 0), (5, 1, 0, 0, 0, 1), (35, 0, 0, 0, 0, 0)]
    return [Sample(t, nodes, pending, 0.1 * nodes, running=running, pods=pods, marked_empty=marked)
            for t, nodes, pending, running, pods, marked in rows]


def test_the_picture_marks_scale_up_launch_deletion_ttl_and_node_deletion() -> None:
    assert markers(story()) == [(1, "scale-up"), (2, "node launched"), (4, "deployment deleted"), (5, "TTL starts"),
                                (35, "node deleted")]
    assert markers(story()[:1]) == []


def test_the_picture_is_a_png(tmp_path: Path) -> None:
    path = tmp_path / "demo.png"
    plot(story(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
