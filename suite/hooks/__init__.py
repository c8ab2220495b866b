"""The helpers of suite/plugin.py's hooks, one hook's work per module (docs/suite.md); plugin.py is their face.

Imports nothing, as gate/'s and fleet/'s: importing one helper imports none of the others.
"""
