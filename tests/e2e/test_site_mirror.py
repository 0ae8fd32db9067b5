"""The lab as one site (specdec_lab/site.py): its hosts download the weights through the site
mirror the first host runs (nginx, roles/site_mirror.py) from the lab's Hub (specdec_lab/hub.py)
with the real huggingface_hub each image carries, and pull their images through its registry
cache. The Hub's counters say what the site cost it."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from specdec.host.layout import RELEASES_DIR, SITE_CA_FILE
from specdec.plan.sites import HUB_PORT, REGISTRY_PORT0
from specdec_lab import hubsvc
from specdec_lab.hubrepo import WEIGHTS, hub_repo
from specdec_lab.sites import host_download
from specdec_lab.spec import LabHost
from tests.e2e.conftest import INSTANCE, LabFleet, PyinfraRun

pytestmark = pytest.mark.e2e
GATED = "meta-llama/Llama-3.2-1B-Instruct"
LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"
MIB10 = 10 * 1024 * 1024  # huggingface_hub's DOWNLOAD_CHUNK_SIZE


def _hub(lab: LabFleet) -> dict[str, Any]:
    out = lab.specdec("lab", "hub", "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _hub_record() -> dict[str, Any]:
    return json.loads(INSTANCE.state_file.read_text())["hub"]


def _mirror(lab: LabFleet) -> LabHost:
    return lab.hosts[0]  # SPECDEC_LAB_MIRROR's default


def _plan(lab: LabFleet, host: str) -> dict[str, Any]:
    return json.loads(lab.ssh(host, f"cat {RELEASES_DIR}/$(basename $(readlink "
                                    "/var/lib/specdec/current))/plan.json").stdout)


def _download(lab: LabFleet, host: str, repo: str, endpoint: str, token: bool,
              scratch: str = "/tmp/specdec-e2e-hf", fresh: bool = True,
              ca: str = SITE_CA_FILE) -> tuple[int, str]:
    """The host's own Hub CLI (in its image, or natively) into a scratch cache, trusting the
    CA file ``ca`` of the host (the site's, as the deploy's downloads do)."""
    cmd = host_download(_plan(lab, host), repo, endpoint, scratch, token, ca)
    clean = f"rm -rf {scratch}; " if fresh else ""
    proc = lab.ssh(host, clean + cmd, check=False, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_site_fetches_each_revision_once(lab: LabFleet, deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    snap = _hub(lab)
    repos = {r for h in lab.hosts for r in (_plan(lab, h.name)["model"],
                                            _plan(lab, h.name)["draft"]) if r}
    fetched = {k.split("@")[0]: c for k, c in snap["copies"].items()}
    assert repos <= set(fetched), (repos, fetched)
    # every host has every file, and the Hub sent one copy of each revision: to the mirror
    assert all(c == 1.0 for c in fetched.values()), fetched
    assert set(snap["by_client"]) == {_mirror(lab).address}, snap["by_client"]
    status = lab.specdec("lab", "status", lab.inventory, timeout=120)
    assert "hub: " in status.stdout and "MiB served" in status.stdout


def test_images_come_through_the_site_registry_cache(lab: LabFleet,
                                                     deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    mirror = _mirror(lab)
    via = f"{mirror.address}:{REGISTRY_PORT0}/"
    docker = [h for h in lab.hosts if _plan(lab, h.name)["runtime"] == "docker"]
    assert docker
    for h in docker:
        image = _plan(lab, h.name)["image"]
        assert image.startswith(via) and "@sha256:" in image, (h.name, image)
        digests = lab.ssh(h.name, "docker image inspect --format "
                          "'{{range .RepoDigests}}{{println .}}{{end}}' "
                          f"{shlex.quote(image)}").stdout.split()
        assert any(d.startswith(via) and d.endswith(image.rsplit("@", 1)[1])
                   for d in digests), (h.name, digests)
    out = lab.ssh(mirror.name, "systemctl is-active specdec-registry-localhost-5000.service "
                               "nginx.service").stdout.split()
    assert out == ["active", "active"]


@pytest.mark.parametrize("host", ["lab-nx", "lab-nano", "lab-dyn1"])
def test_a_gated_repo_through_the_mirror_needs_the_token(lab: LabFleet, deployed: PyinfraRun,
                                                         host: str) -> None:
    """lab-nx's image has huggingface_hub 0.33.5 (huggingface-cli), lab-nano natively 0.36.2,
    lab-dyn1 natively 2.4.0 (as its Dynamo release's vLLM requires)."""
    if host not in {h.name for h in lab.hosts}:
        pytest.skip(f"{host} is not in this lab (SPECDEC_LAB_HOSTS / SPECDEC_LAB_DYNAMO)")
    mirror = f"https://{_mirror(lab).address}:{HUB_PORT}"
    rc, out = _download(lab, host, GATED, mirror, token=False)
    assert rc != 0 and ("GatedRepo" in out or "requires approval" in out or "401" in out), \
        out[-600:]
    rc, out = _download(lab, host, GATED, mirror, token=True)
    assert rc == 0, out[-800:]
    assert lab.hf_token not in out


def test_the_token_never_reaches_the_mirrors_disk_or_logs(lab: LabFleet,
                                                          deployed: PyinfraRun) -> None:
    assert deployed.rc == 0, deployed.summary()
    mirror = _mirror(lab)
    assert _hub(lab)["with_token"] > 0  # the token went to the Hub, through the mirror
    searched = 0
    marker = lab.hf_token.encode()
    # the host's root, read from the control node (the token never goes into a host's argv)
    for d in ("/var/cache/specdec-mirror", "/var/log/nginx", "/etc/nginx",
              "/var/lib/specdec-mirror", "/etc/specdec/mirror"):
        for p in lab.host_path(mirror.name, d).rglob("*"):
            if p.is_file() and not p.is_symlink():
                searched += 1
                assert marker not in p.read_bytes(), f"{mirror.name}: the token is in {p}"
    assert searched > 10
    journal = lab.ssh(mirror.name, "journalctl --no-pager -o cat -u nginx.service "
                                   "-u 'specdec-registry-*'", check=False).stdout
    assert lab.hf_token not in journal


def test_a_cut_download_resumes_from_the_hub(lab: LabFleet, deployed: PyinfraRun) -> None:
    """Straight from the Hub (no mirror between): huggingface_hub 0.36.2 on lab-nano dies at
    the cut and its next run asks for the rest (Range), as up to 1.17 it appends to its
    ``.incomplete`` file."""
    h = next((x for x in lab.hosts if x.name == "lab-nano"), None)
    if h is None:
        pytest.skip("lab-nano is not in this lab")
    rec = _hub_record()
    repo = hub_repo(LLAMA8, rec["scale"])
    assert repo is not None and repo.file(WEIGHTS).size > MIB10 + (1 << 20)  # type: ignore
    hubsvc.control(rec, "/_lab/fault", {"match": WEIGHTS, "cut_after": MIB10 + (1 << 19)})
    endpoint = hubsvc.endpoint(h.gateway)
    scratch = "/tmp/specdec-e2e-resume"
    # a host of the site trusts only the site's CA: the Hub's, for this test only
    ca = "/var/tmp/specdec-e2e-hub-ca.crt"
    lab.host_path(h.name, ca).write_bytes(hubsvc.ca_file(INSTANCE).read_bytes())
    first, out1 = _download(lab, h.name, LLAMA8, endpoint, token=True, scratch=scratch, ca=ca)
    assert first != 0 and "CA certificate" not in out1, out1[-400:]  # the cut, not the CA
    again, out2 = _download(lab, h.name, LLAMA8, endpoint, token=True, scratch=scratch,
                            fresh=False, ca=ca)
    assert again == 0, out2[-600:]
    ranges = [r for r in _hub(lab)["ranges"] if r["path"] == WEIGHTS]
    assert [r["start"] for r in ranges][-1:] == [MIB10], ranges
    snap = f"{scratch}/hub/models--{LLAMA8.replace('/', '--')}/snapshots/{repo.revision}"
    digest = lab.ssh(h.name, f"sha256sum {snap}/{WEIGHTS}").stdout.split()[0]
    assert digest == repo.file(WEIGHTS).sha256  # type: ignore[union-attr]
    lab.ssh(h.name, f"rm -rf {scratch} /tmp/specdec-e2e-hf {ca}")
