"""What pyproject.toml cannot say: the example configs ship inside the package.

They live in the top-level ``configs/`` folder (``make train``, the README and the docs name them there); a wheel
carries the same files as ``honing/_configs/`` (every file below ``configs/``, so new presets ship without an edit
here), where ``honing train`` with no config finds the quickstart. pyproject.toml's ``packages.find`` cannot add a
package from another folder, hence this file; everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["honing", "honing.*"]), "honing._configs"],
    package_dir={"honing._configs": "configs"},
    # the generated key tables of other systems' schemas (honing.interop.configs.key_tables reads them)
    package_data={"honing._configs": ["**/*"], "honing.interop.configs": ["schema_keys/*.json"]},
    exclude_package_data={"honing._configs": ["*.pyc"]},
    # only package_data above: with MANIFEST-driven data on, setuptools warns that every sub-folder of configs/ is a
    # package missing from `packages` (they are data folders, not code)
    include_package_data=False,
)
