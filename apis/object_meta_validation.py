"""Object metadata rules every Karpenter resource shares (knative's ValidateObjectMetadata).

Karpenter v0.16.3 validates a Provisioner's and an AWSNodeTemplate's metadata
with knative.dev/pkg: `generateName` must be a DNS-1035 label prefix, `name` a
DNS-1035 label, and one of them is required. Like knative, only the first
problem is reported. Pure.
"""

from __future__ import annotations

from karpy.apis import labels as wk
from karpy.apis.errors import FieldError
from karpy.apis.meta import ObjectMeta


def validate_object_metadata(meta: ObjectMeta) -> list[FieldError]:
    name, generate_name = meta.name or "", meta.generate_name or ""
    if generate_name and (problems := wk.dns1035_label_errors(generate_name, prefix=True)):
        return [FieldError("metadata.generateName", f"not a DNS 1035 label prefix: {generate_name!r}: {'; '.join(problems)}")]
    if name and (problems := wk.dns1035_label_errors(name)):
        return [FieldError("metadata.name", f"not a DNS 1035 label: {name!r}: {'; '.join(problems)}")]
    if not name and not generate_name:
        return [FieldError("metadata.name", "name or generateName is required")]
    return []
