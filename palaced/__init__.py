"""palaced: the machine-wide palace memory daemon. Imports nothing at package import."""

__version__ = "0.1.0"
