"""Write ``tenantml/data/lcdb.datasets.csv``: the table of LCDB's data sets its authors printed.

LCDB's ``datasets.csv`` (``shared/data/lcdb/lcdb_datasets_meta.csv``) covers 197 of the 248 data
sets of its learning curves. The repository's notebook
``publications/2022-ecml/analysis/2 - dataset metafeatures.ipynb`` (github.com/fmohr/lcdb) prints
the ECML 2022 paper's table of the data sets in the database: OpenML id, name, instances,
features, numeric features, classes, share of missing values (241 rows, OpenML's qualities). This
script parses that printed LaTeX table, and ``import_data.py`` fills from it what the meta lacks.

Run once by a developer::

    NB="publications/2022-ecml/analysis/2 - dataset metafeatures.ipynb"
    git -C <lcdb clone> show "e105db0a:$NB" > /tmp/lcdb-meta.ipynb
    python infra/scripts/extract_lcdb_datasets.py /tmp/lcdb-meta.ipynb

Values are copied; only the LaTeX escapes in the names are undone. ``classes`` is 0 where OpenML's
target is numeric (LCDB discretised it); ``numeric_features`` can exceed ``features`` by one where
OpenML counted a numeric target.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[2] / "tenantml" / "data" / "lcdb.datasets.csv"
COLUMNS = ("openmlid", "name", "instances", "features", "numeric_features", "classes")


def table_rows(notebook: dict[str, Any]) -> list[tuple[int, str, int, int, int, int]]:
    """The rows ``id & name & instances & features & numerical & classes & missing \\\\`` of
    the notebook's printed outputs, in their order; each id once."""
    rows: dict[int, tuple[int, str, int, int, int, int]] = {}
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            for line in "".join(output.get("text", [])).splitlines():
                cells = [c.strip() for c in line.strip().removesuffix("\\\\").split("&")]
                if len(cells) != 7 or not cells[0].isdigit():
                    continue
                openmlid = int(cells[0])
                name = cells[1].replace("\\_", "_")
                counts = tuple(int(c) for c in cells[2:6])
                rows[openmlid] = (openmlid, name, *counts)  # type: ignore[assignment]
    return list(rows.values())


def main(path: Path) -> None:
    rows = table_rows(json.loads(path.read_text()))
    if not rows:
        sys.exit(f"{path}: no line 'id & name & instances & features & ... \\\\' found")
    with OUT.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(sorted(rows))
    print(f"{OUT.name}: {len(rows)} data sets")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: extract_lcdb_datasets.py NOTEBOOK.ipynb")
    main(Path(sys.argv[1]))
