"""Dataset statistics: the paper's Appendix A columns and section 4.2 observations.

    python -m data_gen.stats configs/synthetic_20.yaml [more configs...]
"""

from __future__ import annotations

import argparse
import json

from data_gen.config import load_data_section
from data_gen.dataset import build_dataset
from data_gen.statistics import format_table


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("configs", nargs="+", help="experiment YAML files")
    p.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    args = p.parse_args(argv)
    rows = []
    for path in args.configs:
        cfg = load_data_section(path)
        ds = build_dataset(cfg.dataset, cfg.data_dir, cfg.dataset_name)
        rows.append((cfg.dataset_name, ds.manifest["statistics"]))
    print(json.dumps(dict(rows), indent=2) if args.json else format_table(rows))


if __name__ == "__main__":
    main()
