"""specdec.host."""
