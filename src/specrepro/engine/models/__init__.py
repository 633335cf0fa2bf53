"""Building models: the stand-ins of the CPU run, GGUF conversion, trained drafters and the PyTorch oracle."""
