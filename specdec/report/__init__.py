"""specdec.report.fleet."""
