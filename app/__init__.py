"""onloop's core and web side; `app.web.create_app(settings)` builds the Flask app."""
