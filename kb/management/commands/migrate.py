"""`migrate` runs as the owner role by default: the application role may not change the schema."""

from django.core.management.base import CommandParser
from django.core.management.commands.migrate import Command as MigrateCommand


class Command(MigrateCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.set_defaults(database="owner")
