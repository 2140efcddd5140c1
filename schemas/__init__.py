"""marshmallow request schemas, one module per API family (the protocol layer)."""
