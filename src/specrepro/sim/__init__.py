"""The simulator of SD speedups from acceptance traces and a cost model (the paper's Section 5)."""
