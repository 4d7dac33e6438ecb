"""Settings: what a run is asked to do, declared once and checked before anything runs.

`experiment` (the `Experiment` and its reading from flags, files and mappings), `table` (the settings table
every flag, key, keyword and docs row comes from), `plugins` (which user code may run), `endpoints` (which key
may go to which host) and `fingerprints` (what the inputs and models were, so that runs can be compared).
"""
