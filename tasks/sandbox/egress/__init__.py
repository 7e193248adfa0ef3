"""Setup egress: the allowlisting proxy, its policy, plugin and per-job TLS."""
