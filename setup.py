"""Maps the repository's top-level folders into the `karpy` namespace.

The repository keeps one folder per part (apis/, controller/, webhook/, ...);
installed, they become karpy.apis, karpy.controller, ..., so site-packages
gains `karpy` alone. pyproject.toml holds everything else.
"""

from setuptools import find_packages, setup

FOLDERS = ["apis", "certs", "controller", "webhook", "extender", "simulator", "serving", "kubeclient"]

setup(
    packages=["karpy"] + [f"karpy.{sub}" for sub in find_packages("karpy")] + [f"karpy.{folder}" + (f".{sub}" if sub else "")
                          for folder in FOLDERS for sub in ["", *find_packages(folder)]],
    package_dir={"karpy": "karpy", **{f"karpy.{folder}": folder for folder in FOLDERS}},
)
