"""Stand-in for DreamZero's inference server entry point (see README.md): the console script
`dreamzero-server` exists and answers `--help`, without DreamZero's code."""

import argparse


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="dreamzero-server",
        description="Stand-in for DreamZero's policy server (recipes/stand-in/dreamzero).",
    )
    parser.add_argument("--port", type=int, default=8000, help="port to serve on")
    parser.parse_args(argv)
    print("stand-in: no DreamZero code in this tree")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
