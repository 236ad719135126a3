"""Tools around the pipeline: each is the body of one CLI command.

`convert` (+ `inputs`, `formats`, `tokenizers`): raw text into datasets;
`summary`: what `jaxdata inspect` shows; `exposure`: `jaxdata plan`;
`audit`: `jaxdata audit`; `report`: plots of a run's stats; `mesh`:
`jaxdata mesh`; `bench`: `jaxdata bench`. They use the stages of the data
flow and nothing uses them back.
"""
