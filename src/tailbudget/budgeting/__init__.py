"""Budgets from measurements: `init --from LOG` and `rebudget BUDGET LOG`."""
