from knowflow.cli import app

app(prog_name="knowflow")
