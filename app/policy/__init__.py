"""Policy: repository and organisation config, governance, egress rules."""
