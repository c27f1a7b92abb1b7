"""The package version, in a module of its own: everything below ``gnsqlite`` imports it
from here, never from the package (which would make an import circle)."""

__version__ = "0.1.0"
