"""specdec.tune.search."""
