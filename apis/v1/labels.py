"""Well-known annotations and taints of Karpenter v1's disruption model, each spelled once here.

v0.16's names (`karpenter.sh/do-not-evict` on pods, `karpenter.sh/do-not-consolidate`
on nodes) stay in apis/labels.py; v1 honours them alongside its own. Pure.
"""

from __future__ import annotations

from typing import Final

DO_NOT_DISRUPT: Final = "karpenter.sh/do-not-disrupt"
NODEPOOL_HASH: Final = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION: Final = "karpenter.sh/nodepool-hash-version"
NODECLAIM_TERMINATION_TIMESTAMP: Final = "karpenter.sh/nodeclaim-termination-timestamp"
NODECLAIM_MIN_VALUES_RELAXED: Final = "karpenter.sh/nodeclaim-min-values-relaxed"   # "true" when minValues gave way
DISRUPTED_TAINT_KEY: Final = "karpenter.sh/disrupted"      # NoSchedule while a node is being disrupted

# NodeClaim status condition types the disruption model reads and writes
CONDITION_INITIALIZED: Final = "Initialized"
CONDITION_CONSOLIDATABLE: Final = "Consolidatable"
CONDITION_DRIFTED: Final = "Drifted"
