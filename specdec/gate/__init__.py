"""specdec.gate.decide."""
