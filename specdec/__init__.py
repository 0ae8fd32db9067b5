"""specdec: roll out speculative decoding to Jetson Orin and DGX Spark fleets."""

__version__ = "0.1.0"
__all__ = ["__version__"]
