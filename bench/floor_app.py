"""The floor: a one-option typer app that validates one pydantic model and prints one rich table.

quotacalc cannot start faster than the libraries it is built on; `bench/startup.py` runs this
beside quotacalc so the difference is quotacalc's own cost.
"""

import pydantic
import typer
from rich.console import Console
from rich.table import Table


class Figure(pydantic.BaseModel):
    value: int


app = typer.Typer(add_completion=False)


@app.command()
def show(value: int = 1) -> None:
    table = Table()
    table.add_column("value")
    table.add_row(str(Figure(value=value).value))
    Console().print(table)


if __name__ == "__main__":
    app()
