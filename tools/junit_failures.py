"""Print the failures and errors of a JUnit XML file, the last lines of each, so that a CI log whose end is
all that a reader sees (benchmark tables come after pytest's failure section) still ends with why.

    python tools/junit_failures.py .ci-results/junit.xml [--chars 3000]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit", help="the JUnit XML file pytest wrote (--junitxml)")
    parser.add_argument("--chars", type=int, default=3000, help="the last CHARS of each failure's text")
    args = parser.parse_args(argv)
    try:
        root = ET.parse(args.junit).getroot()
    except (OSError, ET.ParseError) as exc:
        print(f"junit_failures: cannot read {args.junit}: {exc}")
        return 1
    shown = 0
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            for element in case.findall(kind):
                shown += 1
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                text = (element.text or element.get("message") or "").strip()
                print(f"---- {kind}: {name}\n{text[-args.chars:]}\n")
    print(f"junit_failures: {shown} failure(s)/error(s) in {args.junit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
