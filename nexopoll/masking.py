"""Moved to :mod:`nexopoll.services.masking` (output redaction lives in the services).
Kept for the JSON API's import until it calls the services' views only."""

from nexopoll.services.masking import masked, masked_for_ids, redact_tree, secrets_for

__all__ = ["masked", "masked_for_ids", "redact_tree", "secrets_for"]
