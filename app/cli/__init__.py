"""The `onloop` console script: the composition root of the web and the worker processes."""
