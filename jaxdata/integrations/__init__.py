"""Integrations with the tools people already run: `maxtext` (MaxText's config keys and batch features,
`maxtext_keys`) and `megatron` (Megatron's --data-path blend and --split)."""
