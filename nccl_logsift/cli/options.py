"""Options shared by several commands, as decorators."""

from __future__ import annotations

import click

input_paths = click.argument("paths", nargs=-1, type=click.Path(allow_dash=True, path_type=str))
