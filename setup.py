"""Maps the top-level folders onto the `cascade_envs` import package (DESIGN.md §1).

pyproject.toml cannot list nested packages under a remapped folder, so the package list is
computed here; all other metadata lives in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

PACKAGE_DIRS = {
    "cascade_envs": "cascade_envs",
    "cascade_envs.envs": "envs",
    "cascade_envs.plugins": "plugins",
    "cascade_envs.trainer": "trainer",
}

packages = []
for package, folder in PACKAGE_DIRS.items():
    packages.append(package)
    # namespace packages too, so data folders (envs/<domain>/data) ship their files
    packages += [f"{package}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]

setup(packages=packages, package_dir=PACKAGE_DIRS)
