"""The analyses over traces, engine results and the paper's claims (above engine runs and the simulator)."""
