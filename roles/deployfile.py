"""Operation order at the cost pyinfra means it to have, on a fleet.

pyinfra 3.10 orders operations by the call stack: each operation call runs ``inspect.stack()``
(``api/util.py`` ``get_operation_order_from_stack``), which asks ``inspect.getmodule`` for
every frame's module. The deploy file is ``exec``'d (``pyinfra_cli/util.py`` ``exec_file``), so
no module has its path, and ``getmodule`` scans all of ``sys.modules`` (~1,300 here) for each of
its frames: ~1.5 ms per operation and host, ~7 CPU seconds of a 32-host run's prepare. A module
entry named for the file makes that lookup the dict hit it is for every other frame.
"""

from __future__ import annotations

import os
import sys
import types

__all__ = ["name_deploy_file"]


def name_deploy_file(path: str) -> None:
    """Give the exec'd deploy file at ``path`` a (code-less) module entry ``inspect`` finds."""
    name = "_specdec_deploy_" + os.path.splitext(os.path.basename(path))[0]
    if name not in sys.modules:
        mod = types.ModuleType(name, "the pyinfra deploy file (roles/deployfile.py)")
        mod.__file__ = os.path.abspath(path)
        sys.modules[name] = mod
