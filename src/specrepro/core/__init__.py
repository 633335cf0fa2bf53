"""The bottom layer: file formats, traces, cost models, statistics and provenance that every layer above uses."""
