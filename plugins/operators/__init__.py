"""Thin operators over :mod:`photon.ops`; each validates its params before any change."""
