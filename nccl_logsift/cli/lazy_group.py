"""A click group whose subcommands are imported when they are first asked for.

Each command module imports what its command needs: ``analyze`` the parser, polars and the compiled loops,
``batch``
its engines, ``report`` the HTML templates, ``simulate`` the simulator. Importing every module to build
the group made ``logsift --version`` take half a second and every ``logsift analyze`` pay for the
commands it does not run. Here a command's module is imported when click resolves that command by name:
to run it, to print its help, or to list it with its short help in ``logsift --help``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

import click


class LazyGroup(click.Group):
    """A group of commands named by ``"module:attribute"``, imported on first use.

    ``optional`` names commands that may be missing from a checkout: when their module cannot be
    imported, the command is simply absent (help skips it; invoking it is "No such command").
    """

    def __init__(
        self, *args, lazy_commands: Mapping[str, str], optional: frozenset[str] = frozenset(), **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)
        self.optional = optional

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            command = self._import(cmd_name)
            if command is None:
                del self.lazy_commands[cmd_name]
            else:
                self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def _import(self, cmd_name: str) -> click.Command | None:
        module_name, _, attribute = self.lazy_commands[cmd_name].partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            if cmd_name in self.optional:
                return None
            raise
        command = getattr(module, attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{module_name}:{attribute} is not a click command")
        return command
