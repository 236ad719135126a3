"""Research helpers from the data-mixing literature (`mixing`): the DoReMi
domain-weight update, importance weights and per-source losses."""
