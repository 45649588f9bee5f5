"""LCDB's printed table of its data sets (``infra/scripts/extract_lcdb_datasets.py``) and what
the replay's ``lcdb.tenants.csv`` takes from it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.scripts import load_script

DATA_DIR = Path(__file__).resolve().parents[2] / "tenantml" / "data"

NOTEBOOK = {
    "cells": [
        {"outputs": [{"text": ["1347425\n"]}]},
        {
            "outputs": [
                {
                    "text": [
                        "\\begin{tabular}{rlrrrrr}\n",
                        "  id & name & instances & features & numerical & classes & missing \\\\\n",
                        "\\midrule\n",
                        "   3 &  kr-vs-kp &  3196 &  36 &  0 &  2 &  0\\% \\\\\n",
                        " 299 &  libras\\_move &  360 &  90 &  91 &  0 &  0\\% \\\\\n",
                        "\\bottomrule\n",
                    ]
                }
            ]
        },
        {"outputs": [{"text": ["   3 &  kr-vs-kp &  3196 &  36 &  0 &  2 &  0\\% \\\\\n"]}]},
        {"source": ["no outputs"]},
    ]
}


def test_the_table_rows_are_read_once_each_with_names_unescaped() -> None:
    script = load_script("extract_lcdb_datasets")
    assert script.table_rows(NOTEBOOK) == [
        (3, "kr-vs-kp", 3196, 36, 0, 2),
        (299, "libras_move", 360, 90, 91, 0),
    ]


def test_lcdb_tenants_take_the_classes_and_all_numeric_features_the_table_knows() -> None:
    """Where LCDB's meta lacked a data set (OpenML 13, breast-cancer; 1479, hill-valley), the
    carried sizes know what the table says: every class count it gives (0 means a numeric
    target, left unknown), and the features where all are numeric."""
    table = pd.read_csv(DATA_DIR / "lcdb.datasets.csv").set_index("openmlid")
    sizes = pd.read_csv(DATA_DIR / "lcdb.tenants.csv")
    sizes.index = [int(t.removeprefix("openml-")) for t in sizes.tenant]
    both = sizes.join(table, rsuffix="_table", how="inner")
    assert len(both) == len(table) - 1  # 1591 has no curves in the database
    with_classes = both[both.classes_table > 0]
    assert with_classes.classes.notna().all()
    assert both[both.classes_table == 0].classes.isna().all()
    all_numeric = both[both.numeric_features >= both.features_table]
    assert all_numeric.features.notna().all()
    assert sizes.classes[13] == 2 and sizes.features.isna()[13]  # its 9 features are symbolic
    assert (sizes.features[1479], sizes.classes[1479]) == (100, 2)
