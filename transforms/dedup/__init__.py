"""Redundancy filters: the registry, one module or folder per filter family, their Beam stages."""
