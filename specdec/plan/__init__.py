"""specdec.plan.planner."""
