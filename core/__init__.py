"""The floor every other package stands on (docs/architecture.md): the content-addressed artifact cache and its
hashing, input specs and synthetic feeds, making a module from a model factory. Imports nothing of this repo but
itself."""
