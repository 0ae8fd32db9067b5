"""specdec.fleet."""
