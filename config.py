"""pyinfra CLI configuration (loaded from the current directory)."""

REQUIRE_PYINFRA_VERSION = ">=3.10,<4"
