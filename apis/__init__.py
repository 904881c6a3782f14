"""karpy's API types and their rules: Provisioner (karpenter.sh/v1alpha5),
AWSNodeTemplate (karpenter.k8s.aws/v1alpha1), quantities, resource lists,
well-known labels and the requirement algebra. No I/O."""
