"""The helpers of suite/plugin.py's hooks, one hook's work per module (docs/suite.md); plugin.py is their face.

Their imports run one way: configure over the verdict's wiring, the per-test work and the terminal, over the start-up
check, the verdict block, the run's identity, the known failures and junit, over collection, over the helpers that
import no other (a contract in pyproject.toml). Imports nothing, as gate/'s and fleet/'s: importing one helper imports
none of the others.
"""
