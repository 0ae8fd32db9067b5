"""Reading a user's YAML/JSON file with one-line errors that name the file and its role."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from specdec.errors import SpecdecError


def read_yaml(path: str | Path, label: str, error: type[SpecdecError]) -> Any:
    """The parsed document; ``error("<label> <path>: ...")`` when unreadable or not YAML/JSON."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise error(f"{label} {path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise error(f"{label} {path}: not valid YAML/JSON: {first}") from None
