"""HTTP face of the simulator: one blueprint per API family (parse -> validate -> engine -> render)."""
