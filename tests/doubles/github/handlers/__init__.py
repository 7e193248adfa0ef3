"""Request handlers of the GitHub double, one module per area of the REST API."""
