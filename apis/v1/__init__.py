"""Karpenter v1's API: karpenter.sh/v1 NodePool and NodeClaim (nodepool.py, nodeclaim.py) and
karpenter.k8s.aws/v1 EC2NodeClass (ec2nodeclass.py), beside v0.16's v1alpha5 Provisioner.

Beside them: duration.py (Go durations and `Never`), labels.py (v1's disruption
annotations and conditions) and disruption/ (the disruption model's pure decisions).
The CRDs are Karpenter's published ones, shipped here verbatim (*.yaml) with
their validation rules; the models carry the same fields and defaults. Pure.
"""
