"""The bottom layer: settings, logging, crypto, telemetry, job kinds (imports no other onloop)."""
