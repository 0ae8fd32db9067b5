"""specdec.host.identify: real-world identity strings -> catalog device, or a one-line refusal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specdec.errors import IdentifyError
from specdec.host.identify import IDENTITY_FILES, Identity, parse_identity, read_identity_root

REL_36_4_3 = (
    "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, "
    "DATE: Wed Jan  8 01:49:37 UTC 2025\n# KERNEL_VARIANT: oot\n"
)
REL_35_6 = "# R35 (release), REVISION: 6.0, GCID: 37391689, BOARD: t186ref, EABI: aarch64\n"
# NVIDIA's capture on an AGX Thor devkit at R38.4 (NVIDIA/skills @ 7149a886
# skills/jetson-diagnostic/references/tegrastats-fields.md:62-68)
REL_38_4 = (
    "# R38 (release), REVISION: 4.0, GCID: 43443517, BOARD: generic, EABI: aarch64, "
    "DATE: Wed Dec 31 00:15:19 UTC 2025\n# KERNEL_VARIANT: oot\n"
)


def meminfo(kb: int) -> str:
    return f"MemTotal:       {kb} kB\nMemFree:         1234 kB\nMemAvailable:    5678 kB\n"


def jetson(model: str, compatible: str, mem_kb: int, release: str | None = REL_36_4_3) -> dict:
    files: dict[str, str | None] = dict.fromkeys(IDENTITY_FILES)
    files.update({
        "proc/device-tree/model": model + "\0",
        "proc/device-tree/compatible": compatible,
        "etc/nv_tegra_release": release,
        "proc/meminfo": meminfo(mem_kb),
        "uname-m.txt": "aarch64\n",
    })
    return files


AGX64 = jetson(
    "NVIDIA Jetson AGX Orin Developer Kit",
    "nvidia,p3737-0000+p3701-0005\0nvidia,p3701-0005\0nvidia,tegra234\0",
    64_335_836,
)
NANO8 = jetson(
    "NVIDIA Jetson Orin Nano Developer Kit",
    "nvidia,p3768-0000+p3767-0005\0nvidia,p3767-0005\0nvidia,tegra234\0",
    7_802_332,
)
NX16_SUPER = jetson(
    "NVIDIA Jetson Orin NX Engineering Reference Developer Kit Super",
    "nvidia,p3768-0000+p3767-0000-super\0nvidia,p3767-0000\0nvidia,tegra234\0",
    15_655_268,
)
NANO4 = jetson(
    "NVIDIA Jetson Orin Nano Developer Kit",
    "nvidia,p3768-0000+p3767-0004\0nvidia,p3767-0004\0nvidia,tegra234\0",
    3_624_408,
)
SPARK: dict[str, str | None] = dict.fromkeys(IDENTITY_FILES)
SPARK.update({
    "proc/meminfo": meminfo(125_570_024),  # ~119.8 GiB
    "etc/dgx-release": 'DGX_NAME="DGX Spark"\nDGX_PRETTY_NAME="NVIDIA DGX Spark"\n',
    "nvidia-smi.txt": "NVIDIA GB10, [N/A], 580.95.05\n",
    "uname-m.txt": "aarch64\n",
})


def test_identity_files_are_relative() -> None:
    assert "proc/device-tree/compatible" in IDENTITY_FILES
    assert all(not k.startswith("/") for k in IDENTITY_FILES)


def test_agx_orin_64() -> None:
    ident = parse_identity(AGX64)
    assert ident == Identity(
        device="agx-orin-64gb",
        model_string="NVIDIA Jetson AGX Orin Developer Kit",
        module_id="p3701-0005",
        l4t="36.4.3",
        memory_gib=61.4,
        arch="aarch64",
        gpu_name=None,
        module_name="NVIDIA Jetson AGX Orin (64GB ram)",
        jetpack="6.2",
        bandwidth_gbs=204.8,  # no nvpmodel.conf in this fixture: the device's peak
        carrier="p3737-0000",
    )


def test_nano_8gb_and_4gb() -> None:
    assert parse_identity(NANO8).device == "orin-nano-8gb"
    assert parse_identity(NANO8).memory_gib == 7.4
    nano4 = parse_identity(NANO4)
    assert (nano4.device, nano4.module_id, nano4.memory_gib) == ("orin-nano-4gb", "p3767-0004", 3.5)


def test_orin_nx_super_devkit() -> None:
    ident = parse_identity(NX16_SUPER)
    assert ident.device == "orin-nx-16gb"
    assert ident.module_id == "p3767-0000"
    assert ident.model_string.endswith("Developer Kit Super")


def test_l4t_r35() -> None:
    files = dict(AGX64, **{"etc/nv_tegra_release": REL_35_6})
    ident = parse_identity(files)
    assert (ident.l4t, ident.jetpack) == ("35.6.0", "5.1.4")  # jetson_stats NVIDIA_JETPACK


def test_memory_contradiction_fails() -> None:
    # A module id of an 8GB Nano with 4GB of RAM.
    files = dict(NANO8, **{"proc/meminfo": meminfo(3_624_408)})
    with pytest.raises(IdentifyError, match=r"p3767-0005 says orin-nano-8gb .* MemTotal is 3.5"):
        parse_identity(files)


def test_jetson_without_known_module_falls_back_to_model_and_memory() -> None:
    files = dict(AGX64, **{"proc/device-tree/compatible": "nvidia,tegra234\0"})
    assert parse_identity(files).device == "agx-orin-64gb"
    assert parse_identity(files).module_id is None


def test_unsupported_jetson() -> None:
    xavier = jetson(
        "NVIDIA Jetson AGX Xavier Developer Kit",
        "nvidia,p2972-0000\0nvidia,galen\0nvidia,tegra194\0",
        31_960_000,
        REL_35_6,
    )
    with pytest.raises(IdentifyError, match="unsupported Jetson") as exc:
        parse_identity(xavier)
    assert "\n" not in str(exc.value)


def test_spark_by_gpu_name() -> None:
    ident = parse_identity(SPARK)
    assert ident.device == "dgx-spark"
    assert ident.gpu_name == "NVIDIA GB10"
    assert ident.l4t is None and ident.module_id is None
    assert ident.memory_gib == 119.8
    assert ident.model_string == "NVIDIA DGX Spark"


def test_spark_by_dgx_release_only() -> None:
    files = dict(SPARK, **{"nvidia-smi.txt": None})
    assert parse_identity(files).device == "dgx-spark"


def test_dgx_release_on_x86_is_unsupported() -> None:
    files = dict(SPARK, **{"nvidia-smi.txt": "NVIDIA H100 80GB HBM3, 81559 MiB, 570.86\n",
                           "uname-m.txt": "x86_64\n", "proc/meminfo": meminfo(2_113_000_000)})
    with pytest.raises(IdentifyError, match="unsupported hardware"):
        parse_identity(files)


def test_x86_pc_unsupported() -> None:
    files: dict[str, str | None] = dict.fromkeys(IDENTITY_FILES)
    files.update({
        "proc/meminfo": meminfo(32_000_000),
        "nvidia-smi.txt": "NVIDIA GeForce RTX 4090, 24564 MiB, 550.54.14\n",
        "uname-m.txt": "x86_64\n",
    })
    with pytest.raises(IdentifyError) as exc:
        parse_identity(files)
    assert str(exc.value) == (
        "unsupported hardware (GPU NVIDIA GeForce RTX 4090, x86_64): not a Jetson Orin or Thor, "
        "a DGX Spark or a GPU-less x86-64 host"
    )


# The lab machine's own files (a 2-core Xeon VM, Debian 12): /proc/meminfo's head as the kernel
# writes it, `uname -m`, no device tree, no nvidia-smi on PATH, no /etc/dgx-release.
X86_MEMINFO = ("MemTotal:       24683584 kB\nMemFree:        17455624 kB\n"
               "MemAvailable:   22523232 kB\nBuffers:          159448 kB\n"
               "Cached:          4501748 kB\nSwapCached:            0 kB\n")
X86: dict[str, str | None] = dict.fromkeys(IDENTITY_FILES)
X86.update({"proc/meminfo": X86_MEMINFO, "uname-m.txt": "x86_64\n"})


def test_x86_host_without_gpu_is_x86_cpu_with_its_own_memory() -> None:
    ident = parse_identity(X86)
    assert ident == Identity(device="x86-cpu", model_string="x86-64 host (CPU)", module_id=None,
                             l4t=None, memory_gib=23.5, arch="x86_64", gpu_name=None)
    # a generic host: any MemTotal from the catalog's least (8 GiB x MEM_LOW) up
    big = parse_identity(dict(X86, **{"proc/meminfo": meminfo(1_056_000_000)}))
    assert (big.device, big.memory_gib) == ("x86-cpu", 1007.1)


def test_x86_cpu_needs_its_least_memory_and_no_nvidia_hardware() -> None:
    with pytest.raises(IdentifyError, match=r"x86_64 host with 3.8 GiB MemTotal: x86-cpu needs "
                                            r"at least 6.4 GiB"):
        parse_identity(dict(X86, **{"proc/meminfo": meminfo(4_000_000)}))
    # DGX OS on x86 (a DGX H100 whose nvidia-smi is broken) is not a CPU host
    with pytest.raises(IdentifyError, match="DGX OS, x86_64"):
        parse_identity(dict(X86, **{"etc/dgx-release": SPARK["etc/dgx-release"]}))
    # nor is a device tree's machine (an aarch64 board that is no Jetson)
    with pytest.raises(IdentifyError, match="unsupported hardware"):
        parse_identity(dict(X86, **{"uname-m.txt": "aarch64\n"}))


def test_jetson_and_spark_identities_are_unchanged_by_the_cpu_rule() -> None:
    assert parse_identity(AGX64).device == "agx-orin-64gb"
    assert parse_identity(SPARK).device == "dgx-spark"
    # a Jetson's files with a lab's x86_64 `uname -m` stay a Jetson (the device tree decides)
    assert parse_identity(dict(NANO8, **{"uname-m.txt": "x86_64\n"})).device == "orin-nano-8gb"


def test_spark_gpu_with_wrong_memory() -> None:
    with pytest.raises(IdentifyError, match="MemTotal"):
        parse_identity(dict(SPARK, **{"proc/meminfo": meminfo(16_000_000)}))


def test_missing_meminfo() -> None:
    with pytest.raises(IdentifyError, match="MemTotal"):
        parse_identity(dict(AGX64, **{"proc/meminfo": None}))


def _write_root(root: Path, files: dict[str, str | None]) -> None:
    for key, text in files.items():
        if text is not None:
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_text(text)


def test_read_identity_root(tmp_path: Path) -> None:
    _write_root(tmp_path, NX16_SUPER)
    files = read_identity_root(tmp_path)
    assert set(files) == set(IDENTITY_FILES)
    assert files["etc/dgx-release"] is None
    assert files["nvidia-smi.txt"] is None  # not the local machine: no command is run
    assert parse_identity(files).device == "orin-nx-16gb"


def test_cli_identify_root(tmp_path: Path) -> None:
    _write_root(tmp_path, SPARK)
    out = subprocess.run([sys.executable, "-m", "specdec", "identify", "--root", str(tmp_path),
                          "--json"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert '"device": "dgx-spark"' in out.stdout and '"memory_gib": 119.8' in out.stdout
    assert '"l4t": null' in out.stdout


def test_cli_identify_unsupported(tmp_path: Path) -> None:
    _write_root(tmp_path, {"proc/meminfo": meminfo(16_000_000), "uname-m.txt": "riscv64\n"})
    out = subprocess.run([sys.executable, "-m", "specdec", "identify", "--root", str(tmp_path)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and "unsupported hardware" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_module_of_known_family() -> None:
    unknown = jetson(
        "NVIDIA Jetson AGX Orin Developer Kit",
        "nvidia,p3737-0000+p3701-0099\0nvidia,p3701-0099\0nvidia,tegra234\0",
        64_000_000,
    )
    with pytest.raises(IdentifyError, match="unsupported Jetson module p3701-0099") as exc:
        parse_identity(unknown)
    assert "\n" not in str(exc.value)


# Every Orin and Thor module part number NVIDIA ships (jetson_stats MODULE_NAME_TABLE plus the
# AGX Orin Industrial module and the SD-card NX SKU of upstream Linux's tegra.yaml, and the Thor
# modules of OE4T meta-tegra's machine confs), as its device tree shows it on the carrier it
# ships on, with a MemTotal of its size.
ALL_MODULES = {
    "p3701-0000": ("p3737-0000", "NVIDIA Jetson AGX Orin Developer Kit", 30_536 * 1024,
                   "agx-orin-32gb"),
    "p3701-0004": ("p3737-0000", "NVIDIA Jetson AGX Orin Developer Kit", 30_536 * 1024,
                   "agx-orin-32gb"),
    "p3701-0005": ("p3737-0000", "NVIDIA Jetson AGX Orin Developer Kit", 62_801 * 1024,
                   "agx-orin-64gb"),
    "p3701-0008": ("p3737-0000", "NVIDIA Jetson AGX Orin Developer Kit", 62_801 * 1024,
                   "agx-orin-industrial-64gb"),
    "p3701-0002": ("p3740-0002", "NVIDIA IGX Orin Development Kit", 62_801 * 1024,
                   "igx-orin-64gb"),
    "p3767-0000": ("p3768-0000", "NVIDIA Jetson Orin NX Engineering Reference Developer Kit",
                   15_655_268, "orin-nx-16gb"),
    "p3767-0002": ("p3768-0000", "NVIDIA Jetson Orin NX Engineering Reference Developer Kit",
                   15_655_268, "orin-nx-16gb"),
    "p3767-0001": ("p3768-0000", "NVIDIA Jetson Orin NX Engineering Reference Developer Kit",
                   7_620 * 1024, "orin-nx-8gb"),
    "p3767-0003": ("p3768-0000", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit",
                   7_620 * 1024, "orin-nano-8gb"),
    "p3767-0005": ("p3768-0000", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit",
                   7_620 * 1024, "orin-nano-8gb"),
    "p3767-0004": ("p3768-0000", "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit",
                   3_602 * 1024, "orin-nano-4gb"),
    "p3834-0008": ("p4071-0000", "NVIDIA Jetson AGX Thor Developer Kit", 125_772 * 1024,
                   "agx-thor-t5000"),
    "p3834-0000": ("p4071-0000", "NVIDIA Jetson AGX Thor Developer Kit", 62_000 * 1024,
                   "agx-thor-t4000"),
}


@pytest.mark.parametrize("module", sorted(ALL_MODULES))
def test_every_orin_and_thor_module_is_identified(module: str) -> None:
    carrier, model, mem_kb, device = ALL_MODULES[module]
    soc, release = (("tegra264", REL_38_4) if module.startswith("p3834") else
                    ("tegra234", REL_36_4_3))
    files = jetson(model, f"nvidia,{carrier}+{module}\0nvidia,{module}\0nvidia,{soc}\0",
                   mem_kb, release)
    ident = parse_identity(files)
    assert (ident.device, ident.module_id, ident.carrier) == (device, module, carrier)
    assert ident.module_name and ("Orin" in ident.module_name or "T4000" in ident.module_name
                                  or "Thor" in ident.module_name)
    assert ident.jetpack == ("7.1" if soc == "tegra264" else "6.2")


def test_module_table_covers_jetson_stats() -> None:
    from specdec.catalog import load_catalog

    # jetson_stats MODULE_NAME_TABLE (rbonghi/jetson_stats @ f41d5cad), the Orin and Thor entries.
    jetson_stats = {"p3767-0005", "p3767-0004", "p3767-0003", "p3767-0001", "p3767-0000",
                    "p3701-0005", "p3701-0004", "p3701-0002", "p3701-0000", "p3834-0008"}
    table = load_catalog().modules
    assert jetson_stats <= set(table)
    assert set(ALL_MODULES) == set(table)


def _conf(name: str) -> str:
    return (Path(__file__).resolve().parents[2] / "specdec_lab/nvpmodel" / name).read_text()


def test_power_mode_is_read_from_the_conf_not_assumed() -> None:
    nano = dict(NANO8, **{"etc/nvpmodel.conf": _conf("nvpmodel_p3767_0003_super.conf"),
                          "var/lib/nvpmodel/status": "pmode:0000 fmode:quiet\n"})
    ident = parse_identity(nano)
    assert (ident.power_mode, ident.power_mode_id, ident.bandwidth_gbs) == ("15W", 0, 68.3)
    nano["var/lib/nvpmodel/status"] = "pmode:0002 fmode:quiet\n"
    ident = parse_identity(nano)
    assert (ident.power_mode, ident.power_mode_id, ident.bandwidth_gbs) == (
        "MAXN_SUPER", 2, 102.4)
    # No status file yet: the conf's boot default (PM_CONFIG DEFAULT=1: 25W).
    nano["var/lib/nvpmodel/status"] = None
    assert parse_identity(nano).power_mode == "25W"
    agx = dict(AGX64, **{"etc/nvpmodel.conf": _conf("nvpmodel_p3701_0000.conf"),
                         "var/lib/nvpmodel/status": "pmode:0001 fmode:quiet\n"})
    ident = parse_identity(agx)
    assert (ident.power_mode, ident.bandwidth_gbs) == ("MODE_15W", 136.5)
    assert "power mode MODE_15W (id 1)" in ident.describe()


def test_compatible_with_nuls_lost_or_newlines() -> None:
    # A fact may hand over the NUL-separated file with NULs stripped or turned into newlines.
    raw = "nvidia,p3768-0000+p3767-0005\0nvidia,p3767-0005\0nvidia,tegra234\0"
    for text in (raw.replace("\0", ""), raw.replace("\0", "\n")):
        assert parse_identity(dict(NANO8, **{"proc/device-tree/compatible": text})).module_id == (
            "p3767-0005")


@pytest.mark.parametrize("files", [NANO8, SPARK, NX16_SUPER], ids=["nano8", "spark", "nx16"])
def test_identity_command_roundtrip(tmp_path: Path, files: dict[str, str | None]) -> None:
    from specdec.host.identify import identity_command, split_identity_output

    _write_root(tmp_path, files)
    (tmp_path / "proc/device-tree").mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["sh", "-c", identity_command(str(tmp_path))], capture_output=True,
                         text=True, check=True)
    dumped = split_identity_output(out.stdout)
    assert set(dumped) == set(IDENTITY_FILES)
    for key, text in files.items():
        assert (dumped[key] is None) == (text is None), key
    assert parse_identity(dumped) == parse_identity(files)
    assert split_identity_output(out.stdout.splitlines()) == dumped


def test_identity_command_local_runs_commands() -> None:
    from specdec.host.identify import identity_command, split_identity_output

    out = subprocess.run(["sh", "-c", identity_command()], capture_output=True, text=True,
                         check=True)
    dumped = split_identity_output(out.stdout)
    assert dumped["uname-m.txt"] is not None and dumped["uname-m.txt"].strip()
    assert dumped["proc/meminfo"] is not None and "MemTotal" in dumped["proc/meminfo"]


