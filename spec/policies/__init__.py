"""The policies of the spec, one module or small package each (``spec.registry`` lists them)."""
