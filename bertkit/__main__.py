from bertkit.cli.app import app

app()
