"""`python -m jaxdata.demo --resume-check ...`: the demo's restarted process (internal)."""

from __future__ import annotations

import argparse

from jaxdata.demo.run import resume_check

parser = argparse.ArgumentParser(description="jaxdata demo restart check (internal)")
parser.add_argument("--resume-check", required=True)
parser.add_argument("--cache-dir", required=True)
parser.add_argument("--config")
parser.add_argument("--at", type=int, required=True)
parser.add_argument("--count", type=int, required=True)
args = parser.parse_args()
resume_check(args.resume_check, args.cache_dir, args.config, args.at, args.count)
