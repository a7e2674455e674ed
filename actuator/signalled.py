"""Which processes a node's signalled cases are signalling, for one pass over the node.

Every SIGTERM decision asks it (decisions.not_twice: no process gets one step twice). Read
from the store at the pass's first such decision and then kept up to date with the trees
this pass signals, it costs one read per node's pass instead of one per decision over
every signalled case (which grew with the square of the cases signalled together). A case
that leaves the signalled states during the pass stays listed until the next pass: a
process it named is only held back longer, never signalled twice.
"""

from __future__ import annotations

from collections.abc import Callable

from actuator.models import Case

Key = tuple[int, int]  # (pid, start ticks)
Trees = dict[Key, set[int]]  # -> ids of the cases signalling that process


class SignalledTrees:
    def __init__(self, read: Callable[[str, str], Trees]) -> None:
        self._read = read  # (node, boot id) -> the store's recorded trees
        self._by_boot: dict[tuple[str, str], Trees] = {}

    def _trees(self, case: Case) -> Trees:
        key = (case.node, case.boot_id)
        if key not in self._by_boot:
            self._by_boot[key] = self._read(*key)
        return self._by_boot[key]

    def others(self, case: Case, tree: list[Key]) -> dict[Key, int]:
        """Of `tree`, the processes another case is signalling, with one such case's id."""
        trees = self._trees(case)
        found: dict[Key, int] = {}
        for key in tree:
            ids = trees.get(key, set()) - {case.id}
            if ids:
                found[key] = min(ids)
        return found

    def add(self, case: Case) -> None:
        """The tree a case was just committed to signal."""
        trees = self._trees(case)
        for m in case.members or []:
            trees.setdefault((m.pid, m.start_ticks), set()).add(case.id)
        trees.setdefault((case.pid, case.start_ticks), set()).add(case.id)
