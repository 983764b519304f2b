"""PMR-P scoring (paired premises, four choices)."""
