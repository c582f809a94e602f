"""Code injected into a supervised eval (only `sitecustomize` runs there, as a top-level module)."""
