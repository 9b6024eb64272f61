from grm.cli import entry

entry()
