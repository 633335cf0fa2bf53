"""Checking every engine job's arguments and the plugin's hooks against the pinned engines' own source (no GPU)."""
