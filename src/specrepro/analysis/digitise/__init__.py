"""Read the plotted values of the paper's figures from their images alone (importers import the submodules)."""
