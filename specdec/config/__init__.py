"""specdec.config."""
