from bertkit.cli import app

app()
