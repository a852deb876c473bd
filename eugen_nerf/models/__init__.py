"""nerfstudio models that own an EUGen field, its samplers and its losses."""
