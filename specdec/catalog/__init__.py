"""The device and model catalog: what each device, model, EAGLE head and image *is*
(``devices.yaml``, ``models.yaml``, ``images.yaml``), typed and validated on load
(`load_catalog`): `types` holds what an entry is, `parse` reads the YAML files into them,
`images` parses image references and the image table.

May import `specdec.errors`, `config.hygiene` and `engines.version` only."""

from __future__ import annotations

from functools import cache
from importlib import resources

from specdec.catalog.images import Image
from specdec.catalog.parse import parse_catalog
from specdec.catalog.types import (
    DTYPE_BYTES,
    ENGINES,
    FAMILY_CONFIG,
    FAMILY_VOCAB,
    GIB,
    HEAD_FORMATS,
    METHODS,
    PLATFORMS,
    RUNTIMES,
    Catalog,
    Device,
    Head,
    Model,
    Module,
    Quantization,
    Refused,
)

__all__ = [
    "DTYPE_BYTES",
    "ENGINES",
    "FAMILY_CONFIG",
    "FAMILY_VOCAB",
    "GIB",
    "HEAD_FORMATS",
    "METHODS",
    "PLATFORMS",
    "RUNTIMES",
    "Catalog",
    "Device",
    "Head",
    "Image",
    "Model",
    "Module",
    "Quantization",
    "Refused",
    "load_catalog",
    "parse_catalog",
]


@cache
def load_catalog() -> Catalog:
    """The catalog shipped in the package."""
    root = resources.files("specdec.catalog")
    return parse_catalog(root.joinpath("devices.yaml"), root.joinpath("models.yaml"),
                         root.joinpath("images.yaml"))
