"""The job pages: sign-in sessions, for now (the routes are still to come)."""
