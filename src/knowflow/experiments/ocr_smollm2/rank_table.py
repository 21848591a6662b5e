"""Per-family before/after table of mean-rank records (`ocr-smollm2`).

Records are flat: `<family>/<group>/<stat>` with group in test_impl, train_impl, test_fact,
train_fact and stat in mean_rank, top1, mean_rank_first_token, top1_first_token, n,
n_candidates; `all/...` pools the families. The experiment's summary and the report's table
figure both come from `family_ranks`, so report/ only draws.
"""

from __future__ import annotations


def families_of(records: list[dict]) -> list[str]:
    """Family names in the order the records list them (`all` excluded)."""
    seen: list[str] = []
    for key in records[0] if records else ():
        fam = key.split("/", 1)[0]
        if "/" in key and fam != "all" and fam not in seen:
            seen.append(fam)
    return seen


def family_ranks(records: list[dict], causal: dict[str, bool] | None = None) -> dict[str, dict]:
    """Per family: K, chance, mean rank / top-1 before (first record) and after (last record),
    the training people's mean rank after, and the held-out people's fact mean rank after."""
    if not records:
        return {}
    recs = sorted(records, key=lambda r: r["step"])
    before, after = recs[0], recs[-1]
    out = {}
    for fam in [*families_of(recs), "all"]:
        k = after.get(f"{fam}/test_impl/n_candidates")
        if k is None:
            continue
        k = int(k) if float(k).is_integer() else k
        row = {"causal": (causal or {}).get(fam) if fam != "all" else None,
               "n_candidates": k, "chance_mean_rank": (k - 1) / 2,
               "n_test": after.get(f"{fam}/test_impl/n"),
               "mean_rank_before": before.get(f"{fam}/test_impl/mean_rank"),
               "mean_rank_after": after.get(f"{fam}/test_impl/mean_rank"),
               "train_mean_rank_after": after.get(f"{fam}/train_impl/mean_rank"),
               "top1_before": before.get(f"{fam}/test_impl/top1"),
               "top1_after": after.get(f"{fam}/test_impl/top1"),
               "mean_rank_first_token_before": before.get(f"{fam}/test_impl/mean_rank_first_token"),
               "mean_rank_first_token_after": after.get(f"{fam}/test_impl/mean_rank_first_token"),
               "fact_mean_rank_after": after.get(f"{fam}/test_fact/mean_rank"),
               "prior_mean_rank_before": before.get(f"{fam}/test_impl/prior_mean_rank"),
               "prior_mean_rank_after": after.get(f"{fam}/test_impl/prior_mean_rank"),
               "steps": after["step"]}
        for key in ("causal", "prior_mean_rank_before", "prior_mean_rank_after"):
            if row[key] is None:
                del row[key]
        out[fam] = row
    return out
