"""Analysing engine results: metrics of the bench points, cost-model fits and memory arithmetic."""
