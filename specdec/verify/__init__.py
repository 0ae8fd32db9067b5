"""specdec.verify.verifier."""
