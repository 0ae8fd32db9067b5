"""Tuning ``num_speculative_tokens`` (and n-gram against the planned method): `search` (the
response-curve fit and the search over k), `figures` (a bench result's figures for the curve),
`stderr` (a point's standard error), `chart` (the curve as SVG), `store` (where the fleet's tune
cache lives) and `cache` (tuned configurations applied to a plan). Pure Python.

May import `config`, `catalog`, `engines`, `gate`, `bench` and `plan`."""
