"""COSIM-Q and COSIM-C scoring (paired questions with four choices)."""
