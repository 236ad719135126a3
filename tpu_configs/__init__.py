"""Declarative TPU slice and mesh configs, shipped as package data.

Installed as ``jaxdata.tpu_configs``: one YAML file per slice (chips, hosts,
chips per host, topology, default mesh and data axes), plus CPU emulation
configs for tests. Load them with `jaxdata.pipeline.slices.load_slice`.
"""
