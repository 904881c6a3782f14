"""Karpenter v1's disruption model for NodePools, as pure decisions the controllers call.

budgets.py (how many nodes a NodePool may lose now, per reason), consolidatable.py
(consolidateAfter and the Consolidatable condition), do_not_disrupt.py (what holds a
node or pod), expiration.py (expireAfter and terminationGracePeriod), drift.py (the
NodePool template hash and Drifted reasons), methods.py (the order of methods and the
spot-to-spot rule). No I/O, no clock reads: callers pass `now`. Pure.
"""
