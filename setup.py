"""The packages: specdec and specdec_lab as found, and the pyinfra layer (the repository's
top-level roles/, deploys/ and templates/, mapped in pyproject.toml) inside specdec."""

from setuptools import find_packages, setup

MAPPED = ["specdec.roles", "specdec.deploys", "specdec.templates"]

setup(packages=find_packages(include=["specdec", "specdec.*", "specdec_lab", "specdec_lab.*"])
      + MAPPED)
