"""Karpenter v1's API: karpenter.sh/v1 NodePool and NodeClaim (nodepool.py, nodeclaim.py) and
karpenter.k8s.aws/v1 EC2NodeClass (ec2nodeclass.py), beside v0.16's v1alpha5 Provisioner.

The CRDs are Karpenter's published ones, shipped here verbatim (*.yaml) with
their validation rules; the models carry the same fields and defaults. Pure.
"""
