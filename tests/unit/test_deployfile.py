"""roles/deployfile.py: frames of the exec'd deploy file resolve to a module, no scan."""

from __future__ import annotations

import inspect
import sys

from specdec.roles.deployfile import name_deploy_file


def test_frames_of_an_execd_file_resolve_without_a_scan(tmp_path, monkeypatch):
    path = tmp_path / "mydeploy.py"
    path.write_text("import inspect\nframe = inspect.currentframe()\n")
    monkeypatch.chdir(tmp_path)
    data: dict = {"__file__": "mydeploy.py"}
    exec(compile(path.read_text(), "mydeploy.py", "exec"), data)  # as pyinfra's exec_file
    frame = data["frame"]
    assert inspect.getmodule(frame, "mydeploy.py") is None  # unnamed: a full scan, then None
    name_deploy_file("mydeploy.py")
    try:
        mod = inspect.getmodule(frame, "mydeploy.py")
        assert mod is sys.modules["_specdec_deploy_mydeploy"]
        assert mod.__file__ == str(path)
        calls = []
        monkeypatch.setattr(inspect, "ismodule", lambda o: calls.append(o) or False)
        assert inspect.getmodule(frame, "mydeploy.py") is mod  # from the cache: nothing scanned
        assert calls == [frame]
        assert inspect.getframeinfo(frame).lineno == 2
    finally:
        sys.modules.pop("_specdec_deploy_mydeploy", None)
