from app import create_app
from config import Config

config = Config.from_env()
# The web process's entry point (the Procfile's `gunicorn wsgi:app`) refuses a known
# SECRET_KEY here rather than in create_app, which tests build from a Config directly.
# Raising while gunicorn loads the app stops it (exit 3, "Worker failed to boot") with
# the message in its log, instead of serving with a key anyone can read.
config.require_production_secrets()
app = create_app(config)
