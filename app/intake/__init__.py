"""Intake: verified events, the router, `decide()`, commands, and recording a delivery."""
