"""GitHub: App and user clients, the HTTP transport, user tokens, the App manifest."""
