"""The search space: templates, their slots, constraints and masks."""
