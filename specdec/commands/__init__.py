"""CLI command groups (one module each)."""
