"""`python -m proxy.mock_upstream [--window N] [--port P] [--host H] [--strict] [--agent]
[--summary-quality Q] [--latency S]`: the mock provider on its own (`compaction-proxy mock`)."""

import argparse
import sys

from proxy.mock_upstream.command import add_arguments, main, options_from

parser = argparse.ArgumentParser(
    prog="python -m proxy.mock_upstream",
    description="A mock OpenAI-compatible provider, for trying clients without a key.",
)
add_arguments(parser)
sys.exit(main(options_from(parser.parse_args())))
