"""specdec.render.files."""
