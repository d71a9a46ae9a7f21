#!/usr/bin/env python3
"""prom_parse.py: reads the Prometheus text format on standard input with the official client's
parser (prometheus_client.parser) and prints one JSON object: sample name -> list of
{"labels": {...}, "value": number}. The metrics test uses it so that /metrics is checked by a
real parser, not by the test's own. Exit status 1 (and the parser's error) when it does not
parse."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    out = {}
    for family in text_string_to_metric_families(sys.stdin.read()):
        for s in family.samples:
            out.setdefault(s.name, []).append({"labels": dict(s.labels), "value": s.value, "type": family.type})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
