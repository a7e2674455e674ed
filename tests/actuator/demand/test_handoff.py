"""After a reclaim (actuator/demand/handoff.py): the GPU's next holder, a needless reclaim, or
nothing proven."""

from __future__ import annotations

from actuator.demand.handoff import Watched, judge

GIB = 1 << 30


def test_a_reclaimed_gpu_is_taken_needless_or_unknown():
    w = Watched(7, "n1", "GPU-a", "demand", "slurm:4711", 100.0, frozenset({42, 43}))
    assert judge(w, {42: GIB}, 110.0, 3600) is None  # only the reclaimed tree, still listed
    taken = judge(w, {42: GIB, 99: GIB}, 130.0, 3600)
    assert taken is not None and (taken.kind, taken.holders, taken.seconds) == ("taken", (99,), 30)
    assert judge(w, {}, 3699.0, 3600) is None
    needless = judge(w, {}, 3700.0, 3600)
    assert needless is not None and needless.kind == "needless"
    unknown = judge(w, None, 3700.0, 3600)  # an unreadable list proves nothing
    assert unknown is not None and unknown.kind == "unknown"
