"""Tools that look at a pipeline from outside: each is the body of one CLI command.

`summary`: what `jaxdata inspect` shows; `exposure` and `cache_plan`:
`jaxdata plan`; `audit` and `mixture_checks`: `jaxdata audit`; `doctor` (and `doctor_files`, its loss log and page):
`jaxdata doctor`; `report`: plots of a run's stats; `mesh`: `jaxdata mesh`;
`bench`: `jaxdata bench`; `trajectory`: the weights an online controller set or will set;
`numbers`: how they print sizes and counts; `reference`: `jaxdata reference` (a reference
model's log-probabilities stored beside a dataset of pairs). They use
the stages of the data flow; only the CLI, the demo and `jaxdata.tools.exposure` (a public
module) use them.
"""
