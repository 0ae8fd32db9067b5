"""Fingerprints of the devices of 2026 from NVIDIA's own files: Jetson AGX Thor (T5000, T4000),
IGX Thor, AGX Orin Industrial, IGX Orin, DGX Station GB300, GB10 boxes of other vendors, and an
Orin Nano on JetPack 5. Where a string is a third party's capture it says so."""

from __future__ import annotations

import pytest

from specdec.catalog import load_catalog
from specdec.errors import IdentifyError
from specdec.host.identify import IDENTITY_FILES, parse_identity
from specdec.host.power import PowerMode, mode_bandwidth
from tests.unit.test_identify import NANO4, NANO8, REL_35_6, REL_38_4, SPARK, jetson, meminfo

CAT = load_catalog()
# Upstream Linux arch/arm64/boot/dts/nvidia/tegra264-p4071-0000+p3834-0008.dts (Thierry Reding,
# NVIDIA, "arm64: tegra: Add Jetson AGX Thor Developer Kit support"): model and compatible, as
# the L4T -nv.dtb prints them on devices too; MemTotal from NVIDIA's tegrastats capture on a
# T5000 devkit at R38.4 ("RAM 105265/125772MB", NVIDIA/skills tegrastats-fields.md:76).
THOR = jetson("NVIDIA Jetson AGX Thor Developer Kit",
              "nvidia,p4071-0000+p3834-0008\0nvidia,p3834-0008\0nvidia,tegra264\0",
              125_772 * 1024, REL_38_4)
# The T4000: OE4T meta-tegra agx-thor-t4000.inc:51 KERNEL_DEVICETREE
# "tegra264-p4071-0000+p3834-0000-nv.dtb" (NVIDIA's DTB name, whose compatible follows it; the
# T4000's model string and MemTotal are not confirmed: the devkit's, and 62 GB).
T4000 = jetson("NVIDIA Jetson AGX Thor Developer Kit",
               "nvidia,p4071-0000+p3834-0000\0nvidia,p3834-0000\0nvidia,tegra264\0",
               62_000 * 1024, REL_38_4)
# Upstream Linux tegra234-p3740-0002+p3701-0008.dts and tegra234-p3737-0000+p3701-0008.dts
# ("Jetson AGX Orin Developer Kit with Industrial Module": the same model as the devkit's).
IGX = jetson("NVIDIA IGX Orin Development Kit",
             "nvidia,p3740-0002+p3701-0008\0nvidia,p3701-0008\0nvidia,tegra234\0",
             62_801 * 1024)
INDUSTRIAL = jetson("NVIDIA Jetson AGX Orin Developer Kit",
                    "nvidia,p3737-0000+p3701-0008\0nvidia,p3701-0008\0nvidia,tegra234\0",
                    62_801 * 1024)
# NVIDIA/NemoClaw src/lib/readiness/station-qualification.ts @ 8e3d26a7 (parseStationRelease:
# DGX_PLATFORM, DGX_PRETTY_NAME, DGX_NAME) and its test fixture (nvidia-smi name, 256703 MiB,
# MemTotal 761441000 kB).
STATION: dict[str, str | None] = dict.fromkeys(IDENTITY_FILES)
STATION.update({
    "proc/meminfo": meminfo(761_441_000),
    "etc/dgx-release": ('DGX_NAME="DGX GB300WS"\nDGX_PRETTY_NAME="NVIDIA DGX GB300WS"\n'
                        'DGX_PLATFORM="DGX Server for GALAXY-GB300"\n'
                        'DGX_SWBUILD_VERSION="7.6.0"\n'),
    "nvidia-smi.txt": "NVIDIA GB300, 256703 MiB, 580.95.05\n",
    "uname-m.txt": "aarch64\n",
})


def test_agx_thor_t5000_from_nvidias_strings() -> None:
    ident = parse_identity(THOR)
    assert (ident.device, ident.module_id, ident.carrier) == (
        "agx-thor-t5000", "p3834-0008", "p4071-0000")
    assert (ident.l4t, ident.jetpack) == ("38.4.0", "7.1")
    assert ident.memory_gib == 122.8 and ident.bandwidth_gbs == 273
    assert ident.module_name == "NVIDIA Jetson AGX Thor T5000"


def test_thor_t4000_by_its_module_id() -> None:
    ident = parse_identity(T4000)
    assert (ident.device, ident.module_id) == ("agx-thor-t4000", "p3834-0000")
    # the T5000's module id with the T4000's memory is a contradiction, not a guess
    with pytest.raises(IdentifyError, match="p3834-0008 says agx-thor-t5000"):
        parse_identity(dict(THOR, **{"proc/meminfo": meminfo(62_000 * 1024)}))


def test_igx_thor_is_refused_by_its_carrier() -> None:
    # nvpower.sh: p3834-0008 on cvb p4071-0008 (or p3740*) is IGX Thor
    igx = dict(THOR, **{"proc/device-tree/compatible":
                        "nvidia,p4071-0008+p3834-0008\0nvidia,p3834-0008\0nvidia,tegra264\0"})
    with pytest.raises(IdentifyError, match="NVIDIA IGX Thor") as exc:
        parse_identity(igx)
    assert "\n" not in str(exc.value)


def test_thor_power_mode_from_its_own_conf_never_a_guessed_table() -> None:
    from pathlib import Path

    lab = Path(__file__).resolve().parents[2] / "specdec_lab/nvpmodel/lab_p3834_0008.conf"
    files = dict(THOR, **{"etc/nvpmodel.conf": lab.read_text(),
                          "var/lib/nvpmodel/status": "pmode:0000 fmode:quiet\n"})
    ident = parse_identity(files)
    assert (ident.power_mode, ident.power_mode_id, ident.bandwidth_gbs) == ("MAXN", 0, 273)
    dev, mod = CAT.devices["agx-thor-t5000"], CAT.modules["p3834-0008"]
    bw, src = mode_bandwidth(dev, PowerMode(1, "120W"), mod, "38.4.0")
    assert bw == 273 and "not guessed" in src and "nvpmodel_p3834_0008.conf" in src
    # a conf that caps the EMC gives that cap: 2133 MHz x 256-bit
    capped = PowerMode(1, "120W", {"EMC MAX_FREQ": "2133000000"})
    assert mode_bandwidth(dev, capped, mod)[0] == 136.5


def test_igx_orin_and_agx_orin_industrial_are_their_own_devices() -> None:
    igx, ind = parse_identity(IGX), parse_identity(INDUSTRIAL)
    assert (igx.device, igx.module_id, igx.carrier) == ("igx-orin-64gb", "p3701-0008",
                                                        "p3740-0002")
    assert "IGX Orin" in (igx.module_name or "")
    assert (ind.device, ind.module_id) == ("agx-orin-industrial-64gb", "p3701-0008")
    assert "Industrial" in (ind.module_name or "")


def test_igx_and_industrial_modes_come_from_their_own_conf_by_l4t() -> None:
    industrial = CAT.module("p3701-0008")
    igx = CAT.module("p3701-0008", "p3740-0002")
    assert industrial is not None and igx is not None
    # nvpower.sh: the Industrial module fell through to p3701_0000 up to r35.3.1, has its own
    # conf from r35.4.1; on an IGX carrier r35.4.1 gives _3740_0002, r36 nvpmodel_igx_orin
    assert industrial.conf_for("35.3.1") == "nvpmodel_p3701_0000.conf"
    assert industrial.conf_for("35.4.1") == "nvpmodel_p3701_0008.conf"
    assert industrial.conf_for("36.4.3") == "nvpmodel_p3701_0008.conf"
    assert igx.conf_for("35.6.0") == "nvpmodel_p3701_0008_3740_0002.conf"
    assert igx.conf_for("36.4.3") == "nvpmodel_igx_orin.conf"
    assert CAT.module("p3701-0008", "p3971-0000").conf_for("36.4.3") == "nvpmodel_igx_orin.conf"
    # MODE_15W caps the EMC on the AGX Orin conf (136.5 GB/s); on these confs the catalog does
    # not know it: the live conf's cap if it states one, else the peak, said
    for mod in (industrial, igx):
        dev = CAT.devices[mod.device]
        assert not mod.mode_table and dev.power_modes == {}
        bw, src = mode_bandwidth(dev, PowerMode(1, "MODE_15W"), mod, "36.4.3")
        assert bw == 204.8 and "not guessed" in src and mod.conf_for("36.4.3") in src
        capped = PowerMode(1, "MODE_15W", {"EMC MAX_FREQ": "2133000000"})
        assert mode_bandwidth(dev, capped, mod)[0] == 136.5
    with_conf = dict(IGX, **{"etc/nvpmodel.conf": "< POWER_MODEL ID=0 NAME=MAXN >\n",
                             "var/lib/nvpmodel/status": "pmode:0000 fmode:quiet\n"})
    assert parse_identity(with_conf).power_mode == "MAXN"


def test_dgx_station_gb300_is_refused_as_what_it_is() -> None:
    for files in (STATION, dict(STATION, **{"nvidia-smi.txt": None})):
        with pytest.raises(IdentifyError) as exc:
            parse_identity(files)
        msg = str(exc.value)
        assert "NVIDIA DGX Station GB300" in msg and "MemTotal" not in msg
        assert "dgx-spark" not in msg and "\n" not in msg


def test_another_dgx_release_on_arm_is_not_called_a_spark() -> None:
    other = dict(SPARK, **{"nvidia-smi.txt": None,
                           "etc/dgx-release": 'DGX_NAME="DGX Other"\nDGX_PLATFORM="X"\n'})
    with pytest.raises(IdentifyError, match="etc/dgx-release names 'DGX Other'"):
        parse_identity(other)


def test_gb10_boxes_of_other_vendors_identify_as_a_spark() -> None:
    # ASUS Ascent GX10: DGX OS names the box "NVIDIA DGX Spark" (DGX_PLATFORM "GX10": third-party
    # captures); Dell Pro Max with GB10: no /etc/dgx-release in the capture, only NVIDIA's GPU
    asus = dict(SPARK, **{"etc/dgx-release": 'DGX_NAME="DGX Spark"\nDGX_PRETTY_NAME="NVIDIA DGX '
                                             'Spark"\nDGX_PLATFORM="GX10"\n'})
    dell = dict(SPARK, **{"etc/dgx-release": None})
    assert parse_identity(asus).device == parse_identity(dell).device == "dgx-spark"


@pytest.mark.parametrize(("files", "jp5", "jp6"), [(NANO8, 68.3, 102.4), (NANO4, 34.1, 51.2)],
                         ids=["nano8", "nano4"])
def test_orin_nano_on_jetpack5_without_a_mode_is_at_its_presuper_ceiling(
        files: dict[str, str | None], jp5: float, jp6: float) -> None:
    assert parse_identity(dict(files, **{"etc/nv_tegra_release": REL_35_6})).bandwidth_gbs == jp5
    assert parse_identity(files).bandwidth_gbs == jp6  # L4T 36.4.3: a super flash
    dev = CAT.devices[parse_identity(files).device]
    bw, src = mode_bandwidth(dev, None, None, "35.6.0")
    assert bw == jp5 and "before super" in src
