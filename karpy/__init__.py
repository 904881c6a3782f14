"""karpy: Karpenter, the just-in-time Kubernetes node autoscaler, in Python.

Installed, the parts live under this package (karpy.apis, karpy.controller, ...).
In a source checkout they are the repository's top-level folders beside this
one, so the checkout's root joins this package's path: `python -m karpy.main`
and the tests then import the checkout's own code, whatever else is installed.
"""

import os as _os

_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), "apis")) and \
        _os.path.isfile(_os.path.join(_ROOT, "apis", "__init__.py")):
    __path__.append(_ROOT)
