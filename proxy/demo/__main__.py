"""`python -m proxy.demo [--agents N] [--turns N] [--port P] [--no-wait] [--api API]`."""

import argparse
import sys

from proxy.demo.command import main
from proxy.demo.options import add_arguments, options_from

parser = argparse.ArgumentParser(
    prog="python -m proxy.demo", description="Simulated agents through the proxy to a mock model."
)
add_arguments(parser)
sys.exit(main(options_from(parser.parse_args())))
