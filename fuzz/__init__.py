"""Fuzz targets for gnsqlite's parsers and decoders (see fuzz/README.md)."""
