"""SIREN's classic experiment: fitting one image with a SIREN (dense or with EUGen hidden layers)."""
