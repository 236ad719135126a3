"""Integrations with the training loops people already run: `maxtext` (MaxText's config keys and batch features)."""
