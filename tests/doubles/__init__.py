"""Doubles and helpers: the GitHub double, chat, git and package-index servers, payloads."""
