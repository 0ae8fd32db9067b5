"""specdec: roll out speculative decoding to Jetson Orin and DGX Spark fleets with pyinfra.

Data flows one way: inventory + group data + facts -> plan -> render -> provision -> release ->
verify -> commit | rollback -> report. Packages by concern, bottom to top (docs/ARCHITECTURE.md
has the layers and what may import what): `errors`; `config` and the shared vocabulary;
`catalog`; `host`; `engines`; `gate`; `bench`; `plan`; `render`; `tune`; `verify`; `report`;
`watch`; `fleet`; the pyinfra layer (`specdec.roles`, `specdec.deploys`); `cli`. The lab and the
engine emulator are a package of their own, `specdec_lab`, which this package never imports."""

__version__ = "0.1.0"
__all__ = ["__version__"]
