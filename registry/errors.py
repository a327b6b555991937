"""Errors of the IdRegistry. Each message says what happened and what to do."""

from __future__ import annotations


class RegistryError(RuntimeError):
    """Base of every IdRegistry error."""


class RegistryUnavailableError(RegistryError):
    """The ensemble did not answer within the configured retry limits."""


class EpochConflictError(RegistryError):
    """Another client changed the sharding config first (compare-and-set lost)."""


class GcBoundaryRegressionError(RegistryError):
    """A GC boundary may only move forward."""


class AttemptFencedError(RegistryError):
    """The attempt this client registers for was fenced (recovery took its ids over):
    it may neither commit nor write output any more."""


class BatchFencedError(AttemptFencedError):
    """A batch of this attempt that recovery took over (it had ended without writing
    some of its ids): a task of it still running (a zombie) may not write."""


class InvalidTokenError(RegistryError, ValueError):
    """A token that is empty, too long or not text."""
