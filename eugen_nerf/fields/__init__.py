"""nerfstudio fields built from EUGen MLPs (one module per head)."""
